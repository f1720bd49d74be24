"""A range of verified bytes of a segment file, to be sent as it is (Kafka's ``FileRecords.slice``).

A :class:`FileSlice` owns a duplicate of the file descriptor its bytes were checked through
(:mod:`storage_engine.segment.verified`): the segment may be swapped by the cleaner, deleted by retention or closed
by this process meanwhile, and the slice still reads the same inode. It closes that descriptor once sent
(:meth:`close`; dropped unsent, it closes when collected). The broker's connection writes it with ``sendfile``
(or, on a TLS listener, in bounded pieces read from the file: :meth:`pieces`), checking before each piece that the
file still holds the whole range (:meth:`check_whole`): a file cut shorter under a send ends the connection, never
a frame with other bytes in it.
"""
from __future__ import annotations

import os
from collections.abc import Iterator

from storage_engine.errors import CorruptRecordError, StorageIOError

PIECE_BYTES = 1024 * 1024     # one read of a slice that cannot be sent with sendfile (and the tests' reads)


class FileSlice:
    """``length`` bytes at ``position`` of the file open as ``fd`` (owned: closed by :meth:`close`)."""

    __slots__ = ("fd", "position", "length", "path")

    def __init__(self, fd: int, position: int, length: int, path: str):
        self.fd = fd
        self.position = position
        self.length = length
        self.path = path

    @classmethod
    def of(cls, fd: int, position: int, length: int, path: str) -> "FileSlice":
        """A slice of the file open as ``fd`` (not owned: duplicated here)."""
        try:
            return cls(os.dup(fd), position, length, path)
        except OSError as exc:
            raise StorageIOError("cannot duplicate the descriptor of log file", path, exc) from exc

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileSlice({self.path!r}, position={self.position}, length={self.length})"

    def check_whole(self) -> None:
        """Raise :class:`CorruptRecordError` unless the file still holds every byte of the slice."""
        size = os.fstat(self.fd).st_size
        if size < self.position + self.length:
            raise CorruptRecordError(f"the file was cut to {size} bytes under a send of bytes "
                                     f"[{self.position}, {self.position + self.length})", self.path, size)

    def pieces(self, piece: int = PIECE_BYTES) -> Iterator[bytes]:
        """The slice's bytes, ``piece`` bytes at a time (each checked whole first)."""
        pos, end = self.position, self.position + self.length
        while pos < end:
            self.check_whole()
            data = os.pread(self.fd, min(piece, end - pos), pos)
            if not data:
                raise CorruptRecordError(f"the file ended at {pos} under a read of [{self.position}, {end})",
                                         self.path, pos)
            pos += len(data)
            yield data

    def __bytes__(self) -> bytes:
        return b"".join(self.pieces())

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        fd = getattr(self, "fd", -1)
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass
