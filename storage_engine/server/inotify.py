"""Linux inotify through ``ctypes`` (no dependency): one non-blocking descriptor, watches added and removed by
path, events read in bulk as (watch descriptor, mask, name).

Only the calls the broker's partition watcher needs (:mod:`storage_engine.server.file_watch`). Where inotify is
missing (not Linux, a C library without it, or ``fs.inotify.max_user_instances`` used up) :func:`open_inotify`
returns None and the watcher stats files instead; a watch refused (``fs.inotify.max_user_watches`` used up, a
path gone) raises ``OSError`` for that path only.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

# Everything that can change what a reader of the folder sees: bytes written (an append, a truncation), files made,
# renamed or removed (a roll, a cleaner's swap, retention), the folder itself removed or renamed (a deletion, a move).
DIR_EVENTS = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)

_EVENT = struct.Struct("iIII")


class Inotify:
    """One inotify instance. Not thread-safe by itself: the caller serializes add/remove/read."""

    def __init__(self, libc: ctypes.CDLL, fd: int):
        self._libc = libc
        self.fd = fd

    def add(self, path: str, mask: int = DIR_EVENTS) -> int:
        """The watch descriptor of ``path`` (the same one again for a path already watched)."""
        wd = int(self._libc.inotify_add_watch(self.fd, os.fsencode(path), ctypes.c_uint32(mask)))
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"inotify_add_watch: {os.strerror(err)}", path)
        return wd

    def remove(self, wd: int) -> None:
        """Stop a watch (its IN_IGNORED event follows); a watch the kernel already dropped is no error."""
        if int(self._libc.inotify_rm_watch(self.fd, ctypes.c_int(wd))) < 0:
            err = ctypes.get_errno()
            if err != errno.EINVAL:
                raise OSError(err, f"inotify_rm_watch: {os.strerror(err)}")

    def read(self) -> list[tuple[int, int, str]]:
        """The events queued now, as (wd, mask, name); [] when none."""
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        out = []
        pos = 0
        while pos + _EVENT.size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, pos)
            pos += _EVENT.size
            name = data[pos:pos + length].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
            pos += length
            out.append((wd, mask, name))
        return out

    def close(self) -> None:
        os.close(self.fd)


def open_inotify() -> Inotify | None:
    """A non-blocking inotify instance, or None where the system has none to give."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        init = libc.inotify_init1
    except (OSError, AttributeError):
        return None
    fd = int(init(IN_NONBLOCK | IN_CLOEXEC))
    if fd < 0:
        return None
    return Inotify(libc, fd)
