"""Topic configs set over the wire (CreateTopics, IncrementalAlterConfigs), kept where every process reads them.

Kafka keeps dynamic topic configs in its metadata log; here they are a JSON file in every log dir
(``.engine+topic-configs.json``, :data:`~storage_engine.layout.TOPIC_CONFIGS_FILE`), written atomically with a serial
number that grows with each change: :func:`load` takes the copy with the highest serial among the dirs it can read,
so a log dir that went offline (unreadable, failed disk) takes no topic's configs with it. Loading
a config (:func:`storage_engine.config_file.load_config`) merges it over the config file's ``topics:``, so the
maintenance jobs retain and compact a topic created with ``retention.ms`` or ``cleanup.policy=compact`` over the
wire exactly as one configured in the file. Values are kept as the client sent them (strings) and are checked
against :data:`~storage_engine.config_keys.TOPIC_KEYS` both when written and when loaded.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence

from storage_engine.durable import atomic_write, read_regular_file
from storage_engine.errors import ConfigError, StorageError, UnsafeFileError
from storage_engine.layout import TOPIC_CONFIGS_FILE

MAX_BYTES = 16 * 1024 * 1024
VERSION = 1


def path_in(log_dir: str) -> str:
    return os.path.join(log_dir, TOPIC_CONFIGS_FILE)


def read(log_dir: str) -> dict[str, dict[str, str]]:
    """{topic: {key: value}} stored in ``log_dir``; empty when there is no file. A damaged or unreadable file is
    a :class:`ConfigError` naming it (configs are never guessed)."""
    try:
        found = _read(log_dir)
    except OSError as exc:
        raise ConfigError(f"cannot read topic configs {path_in(log_dir)}: {exc.strerror or exc}") from None
    return {} if found is None else found[1]


def load(log_dirs: Sequence[str]) -> dict[str, dict[str, str]]:
    """The newest copy (highest serial) among the log dirs that can be read; a dir that cannot be read (offline)
    is skipped, a damaged copy is a :class:`ConfigError`."""
    best: tuple[int, dict[str, dict[str, str]]] | None = None
    for d in log_dirs:
        try:
            found = _read(d)
        except OSError:
            continue
        if found is not None and (best is None or found[0] > best[0]):
            best = found
    return {} if best is None else best[1]


def save(log_dirs: Sequence[str], topics: Mapping[str, Mapping[str, str]]) -> None:
    """Write ``topics`` into every log dir that can be written, with a serial above any copy's; fails only when
    no dir took it."""
    serial = 0
    for d in log_dirs:
        try:
            found = _read(d)
        except (OSError, ConfigError):
            continue
        if found is not None:
            serial = max(serial, found[0])
    written, errors = 0, []
    for d in log_dirs:
        try:
            write(d, topics, serial=serial + 1)
            written += 1
        except (OSError, StorageError) as exc:
            errors.append(f"{d}: {exc}")
    if not written:
        raise ConfigError("cannot store topic configs in any log dir: " + "; ".join(errors))


def replace(log_dirs: Sequence[str], topic: str, configs: Mapping[str, str]) -> bool:
    """Make ``configs`` the wire-set configs of ``topic`` (none: forget the topic) in every dir; returns whether
    anything changed (nothing is written when nothing did)."""
    stored = load(log_dirs)
    before = stored.get(topic)
    if configs:
        stored[topic] = dict(configs)
    else:
        stored.pop(topic, None)
    if before == stored.get(topic):
        return False
    save(log_dirs, stored)
    return True


def _read(log_dir: str) -> tuple[int, dict[str, dict[str, str]]] | None:
    path = path_in(log_dir)
    try:
        raw = read_regular_file(path, MAX_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UnsafeFileError as exc:
        raise ConfigError(f"topic configs {path}: {exc.reason}") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"topic configs {path}: not valid JSON ({exc})") from None
    topics = data.get("topics") if isinstance(data, dict) and data.get("version") == VERSION else None
    serial = data.get("serial", 0) if isinstance(data, dict) else 0
    if not isinstance(topics, dict) or not isinstance(serial, int) or not all(
            isinstance(t, str) and isinstance(c, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                              for k, v in c.items())
            for t, c in topics.items()):
        raise ConfigError(f"topic configs {path}: expected {{\"version\": {VERSION}, \"topics\": "
                          "{topic: {key: string}}}")
    return serial, {t: dict(c) for t, c in topics.items()}


def write(log_dir: str, topics: Mapping[str, Mapping[str, str]], *, serial: int = 1) -> None:
    """Replace the configs stored in ``log_dir`` with ``topics`` (topics without any config are left out)."""
    data = {"version": VERSION, "serial": serial,
            "topics": {t: dict(sorted(c.items())) for t, c in sorted(topics.items()) if c}}
    atomic_write(path_in(log_dir), json.dumps(data, indent=1).encode("utf-8"))


def merged(file_topics: Mapping[str, object], stored: Mapping[str, Mapping[str, str]]) -> dict[str, object]:
    """The config file's ``topics:`` with the stored (wire-set) values on top, key by key."""
    out: dict[str, object] = {t: dict(c) if isinstance(c, Mapping) else c for t, c in file_topics.items()}
    for topic, conf in stored.items():
        base = out.get(topic)
        out[topic] = {**(dict(base) if isinstance(base, Mapping) else {}), **conf}
    return out
