"""The ACLs, kept crash-safe in one file: ``.engine+acls.json`` (:data:`~storage_engine.layout.ACLS_FILE`) in the
first log dir.

Kafka keeps ACLs as records of its metadata log; a one-broker store keeps the whole set in one small JSON file:
``{"version": 1, "acls": [{resource_type, name, pattern_type, principal, host, operation, permission}, ...],
"crc32": <of the acls' canonical JSON>}``, the enum values by Kafka's names (``TOPIC``, ``PREFIXED``, ``READ``,
``ALLOW``). Every change rewrites it whole, under an flock (:data:`~storage_engine.layout.ACLS_LOCK_FILE`) and
this process's mutex: written to ``.tmp``, fsynced, renamed over the file, the dir fsynced, and only then
answered. So after a crash (kill -9, power cut) at any step the file is the old set or the new one, never a
mix, and a change a client saw acknowledged is in it. A ``.tmp`` left by a crash is never the truth (the
change was not answered) and is removed when the store opens.

A file that cannot be parsed, fails its checksum or names a value Kafka does not have is an
:class:`~storage_engine.errors.ConfigError` naming the file: ``serve`` does not start on it (a damaged ACL
file never reads as "no ACLs", which with ``allow.everyone.if.no.acl.found`` would allow everything). A file
changed on disk while the broker runs is reloaded within :data:`RELOAD_S`; if that copy is damaged the broker
keeps the set it had, logs the error and refuses changes until the file is repaired. An ACL file in another log
dir while the first has none (``log.dirs`` reordered) is refused the same way.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

from storage_engine.acl.filters import AclBindingFilter
from storage_engine.acl.model import AclBinding, Operation, PatternType, Permission, ResourceType, invalid_reason
from storage_engine.durable import atomic_write, fsync_dir, read_regular_file
from storage_engine.errors import ConfigError
from storage_engine.layout import ACLS_FILE, ACLS_LOCK_FILE, TMP_SUFFIX

logger = logging.getLogger(__name__)

VERSION = 1
MAX_BYTES = 64 * 1024 * 1024
RELOAD_S = 1.0     # how stale the broker's view of a file changed by hand may be
_FIELDS = ("resource_type", "name", "pattern_type", "principal", "host", "operation", "permission")


def path_in(log_dirs: Sequence[str]) -> str:
    """The ACL file's path: in the first log dir. An ACL file in another log dir while the first has none (the
    dirs reordered in ``log.dirs``) is a :class:`ConfigError`: starting without it would read as "no ACLs"."""
    path = os.path.join(log_dirs[0], ACLS_FILE)
    if not os.path.lexists(path):
        for other in log_dirs[1:]:
            misplaced = os.path.join(other, ACLS_FILE)
            if os.path.lexists(misplaced):
                raise ConfigError(f"the ACL file is {misplaced}, not in the first log dir {log_dirs[0]} (log.dirs "
                                  f"reordered?): put {log_dirs[0]} first again in log.dirs, or move the file there")
    return path


def _to_json(acl: AclBinding) -> dict[str, str]:
    return {"resource_type": acl.resource_type.name, "name": acl.name, "pattern_type": acl.pattern_type.name,
            "principal": acl.principal, "host": acl.host, "operation": acl.operation.name,
            "permission": acl.permission.name}


def _canonical(items: list[dict[str, str]]) -> bytes:
    return json.dumps(items, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def encode(acls: Sequence[AclBinding]) -> bytes:
    items = [_to_json(a) for a in acls]
    doc = {"version": VERSION, "acls": items, "crc32": zlib.crc32(_canonical(items))}
    return (json.dumps(doc, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def _enum(kind: Any, value: object, what: str) -> Any:
    if not isinstance(value, str) or value not in kind.__members__:
        raise ValueError(f"{what} {value!r} is not one of {', '.join(kind.__members__)}")
    return kind[value]


def decode(data: bytes, path: str) -> tuple[AclBinding, ...]:
    """The ACLs of a file's content; a :class:`ConfigError` naming ``path`` and what is wrong."""
    try:
        doc = json.loads(data.decode("utf-8"))
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise ValueError(f"not an ACL file of version {VERSION}")
        items = doc.get("acls")
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            raise ValueError("'acls' is not a list of objects")
        if doc.get("crc32") != zlib.crc32(_canonical(items)):
            raise ValueError("checksum mismatch (the file was altered or damaged)")
        out = []
        for n, item in enumerate(items):
            if set(item) != set(_FIELDS) or not all(isinstance(item[f], str) for f in ("name", "principal", "host")):
                raise ValueError(f"ACL #{n} does not have exactly the string fields {', '.join(_FIELDS)}")
            acl = AclBinding(_enum(ResourceType, item["resource_type"], "resource_type"), item["name"],
                             _enum(PatternType, item["pattern_type"], "pattern_type"), item["principal"],
                             item["host"], _enum(Operation, item["operation"], "operation"),
                             _enum(Permission, item["permission"], "permission"))
            reason = invalid_reason(acl)
            if reason is not None:
                raise ValueError(f"ACL #{n}: {reason}")
            out.append(acl)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"damaged ACL file {path}: {exc}") from None
    return tuple(out)


def _read(path: str) -> tuple[tuple[AclBinding, ...], tuple[int, int, int] | None]:
    """(ACLs, the file's identity (inode, size, mtime)); no file: nothing, None."""
    try:
        st = os.stat(path)
        data = read_regular_file(path, MAX_BYTES)
    except FileNotFoundError:
        return (), None
    except OSError as exc:
        raise ConfigError(f"cannot read ACL file {path}: {exc.strerror or exc}") from None
    return decode(data, path), (st.st_ino, st.st_size, st.st_mtime_ns)


def read_acls(log_dirs: Sequence[str]) -> tuple[AclBinding, ...]:
    """The stored ACLs, for readers (the console, ``python -m storage_engine acls``); none when there is no
    file; a damaged file is a :class:`ConfigError` naming it."""
    return _read(path_in(log_dirs))[0]


def write_file(path: str, acls: Sequence[AclBinding]) -> None:
    """Replace the file with ``acls``: temp, fsync, rename, dir fsync (a crash leaves the old or the new)."""
    atomic_write(path, encode(acls), steps="acl", what="the ACL file")


class AclStore:
    """The broker's ACLs: :meth:`current` for the authorizer, :meth:`create` and :meth:`delete` for the APIs."""

    def __init__(self, log_dirs: Sequence[str]):
        self.path = path_in(log_dirs)
        self._lock_path = os.path.join(log_dirs[0], ACLS_LOCK_FILE)
        self._mutex = threading.Lock()
        tmp = self.path + TMP_SUFFIX
        if os.path.lexists(tmp):      # a rewrite cut short: never answered, the file holds the set before it
            logger.info("removing %s left by a rewrite of the ACLs that did not finish", tmp)
            os.remove(tmp)
            fsync_dir(os.path.dirname(os.path.abspath(tmp)))
        self._acls, self._stamp = _read(self.path)       # ConfigError on a damaged file: serve stops
        self._checked = time.monotonic()
        self._damaged: str | None = None
        logger.info("ACLs: %d in %s", len(self._acls), self.path)

    def current(self) -> tuple[AclBinding, ...]:
        """The ACLs, re-read when the file changed on disk (checked at most every :data:`RELOAD_S`)."""
        now = time.monotonic()
        if now - self._checked >= RELOAD_S:
            with self._mutex:
                if now - self._checked >= RELOAD_S:
                    self._reload_locked()
                    self._checked = now
        return self._acls

    def _reload_locked(self) -> None:
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stamp = None
        except OSError as exc:
            logger.error("cannot stat the ACL file %s: %s; the ACLs loaded before stay in force", self.path, exc)
            return
        if stamp == self._stamp:
            return
        try:
            self._acls, self._stamp = _read(self.path)
        except ConfigError as exc:
            if self._damaged != str(exc):
                logger.error("%s; the %d ACLs loaded before stay in force, changes are refused until it is "
                             "repaired", exc, len(self._acls))
            self._damaged = str(exc)
            return
        self._damaged = None
        if self._stamp is None:
            logger.warning("the ACL file %s was removed: no ACLs now", self.path)
        else:
            logger.info("ACLs reloaded from %s: %d", self.path, len(self._acls))

    def _change(self, fn: Callable[[list[AclBinding]], bool]) -> None:
        """Apply ``fn`` to the stored ACLs (re-read under the lock) and write them if it says they changed."""
        with self._mutex:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                acls, stamp = _read(self.path)    # a damaged file is refused here: never overwritten
                work = list(acls)
                if fn(work):
                    write_file(self.path, work)
                    st = os.stat(self.path)
                    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
                self._acls, self._stamp, self._damaged = tuple(work), stamp, None
                self._checked = time.monotonic()
            finally:
                os.close(fd)      # releases the flock

    def create(self, bindings: Sequence[AclBinding]) -> None:
        """Add ``bindings`` (valid ones: see :func:`~storage_engine.acl.model.invalid_reason`); one already
        stored is not added twice (Kafka answers success for it)."""
        def add(work: list[AclBinding]) -> bool:
            known = set(work)
            new = [b for b in dict.fromkeys(bindings) if b not in known]
            work.extend(new)
            return bool(new)
        self._change(add)

    def delete(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding]]:
        """Remove every ACL a filter matches; the ACLs each filter matched (one ACL can be in several)."""
        matched: list[list[AclBinding]] = []

        def remove(work: list[AclBinding]) -> bool:
            matched.clear()
            doomed: set[AclBinding] = set()
            for f in filters:
                hits = [a for a in work if f.matches(a)]
                matched.append(hits)
                doomed.update(hits)
            work[:] = [a for a in work if a not in doomed]
            return bool(doomed)
        self._change(remove)
        return matched

    def describe(self, flt: AclBindingFilter) -> list[AclBinding]:
        return [a for a in self.current() if flt.matches(a)]
