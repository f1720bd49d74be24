"""A response goes out part by part: a fetch's records that are a file slice (verified bytes of a segment file:
:mod:`storage_engine.segment.file_slice`) are sent with ``sendfile`` straight from the file (a TLS listener cannot,
so there the bytes are read in pieces off the event loop and written), in pieces of at most :data:`SEND_PIECE`
bytes, each sent only if the file still holds all of its slice: a file cut shorter under the send closes the
connection mid-frame (the client drops a partial frame), so no other bytes ever go out in its place. While the
socket takes them, such a response is written straight to it under ``TCP_CORK`` (``os.write``, ``os.sendfile``:
full segments, no wake-up of the client for the header alone); once it is full, the rest goes through the stream
writer and ``loop.sendfile``, which wait for it.
What the connection buffers of a response is bounded by the small parts between slices, whatever ``max_bytes``.
"""
from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence

from storage_engine.errors import CorruptRecordError
from storage_engine.segment.file_slice import FileSlice
from storage_engine.server.settings import Listener

Buffer = bytes | bytearray | memoryview
Part = Buffer | FileSlice                 # a response's parts: buffers, and file slices sent from their files
SEND_PIECE = 1024 * 1024               # bytes of a file slice sent per sendfile call (each checked whole first)


class Closing(Exception):
    """Close the connection after logging this one line."""


class ResponseSender:
    """The sending half of a connection (:class:`storage_engine.server.connection.Connection`)."""

    writer: asyncio.StreamWriter
    listener: Listener

    async def _send(self, parts: list[Part]) -> None:
        """Write a response's parts in order; file slices are closed once sent (or on failure)."""
        try:
            if self.listener.tls or not any(isinstance(p, FileSlice) for p in parts):
                await self._send_queued(parts)
            else:
                await self._send_corked(parts)
        finally:
            for part in parts:
                if isinstance(part, FileSlice):
                    part.close()

    async def _send_queued(self, parts: Sequence[Part]) -> None:
        """Buffers through the stream writer, file slices after what was written before them."""
        for part in parts:
            if isinstance(part, FileSlice):
                await self._send_file(part, part.position)
            else:
                self.writer.write(part)
        await self.writer.drain()

    async def _send_corked(self, parts: list[Part]) -> None:
        """A response with file slices on a plain socket whose writer has nothing queued: written straight to the
        socket (buffers with ``write``, slices with ``os.sendfile``) under ``TCP_CORK``, so the header, the records
        and the tagged fields after them leave as full segments and the client is not woken for a few bytes. What
        the socket does not take at once goes through the writer and the loop's ``sendfile``, in order, and
        the cork is taken off whatever happens (which pushes out the last segment)."""
        transport = self.writer.transport
        if transport.get_write_buffer_size() or transport.is_closing():
            await self._send_queued(parts)
            return
        sock = transport.get_extra_info("socket")
        fd = sock.fileno()
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        except OSError:                  # not a TCP socket: the writer's way
            await self._send_queued(parts)
            return
        try:
            for i, part in enumerate(parts):
                if transport.get_write_buffer_size():     # a part the socket did not take whole is queued
                    await self._send_queued(parts[i:])
                    return
                if isinstance(part, FileSlice):
                    await self._send_file_direct(fd, part)
                    continue
                try:
                    n = os.write(fd, part)
                except (BlockingIOError, InterruptedError):
                    n = 0
                if n < len(part):
                    self.writer.write(memoryview(part)[n:])
            await self.writer.drain()
        finally:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            except OSError:
                pass                     # the connection is gone: nothing left to push

    async def _send_file_direct(self, fd: int, part: FileSlice) -> None:
        """``part``'s bytes with ``os.sendfile`` while the socket takes them (each call checked whole first, as
        every piece is); the rest, once the socket is full, through the loop's ``sendfile``, which waits for it."""
        pos, end = part.position, part.position + part.length
        try:
            while pos < end:
                part.check_whole()
                try:
                    sent = os.sendfile(fd, part.fd, pos, _piece(part, pos))
                except (BlockingIOError, InterruptedError):
                    break
                if sent == 0:
                    raise Closing(f"a fetch response was cut short: {part.path} ended at {pos} under a send of "
                                  f"[{part.position}, {end})")
                pos += sent
        except CorruptRecordError as exc:
            raise Closing(f"a fetch response was cut short: {exc}") from None
        if pos < end:
            await self._send_file(part, pos)

    async def _send_file(self, part: FileSlice, start: int) -> None:
        """``part``'s bytes from ``start`` straight from its file, after what was written before them; a file cut
        under the send closes the connection (one line naming it)."""
        try:
            await self._send_file_pieces(part, start)
        except CorruptRecordError as exc:
            raise Closing(f"a fetch response was cut short: {exc}") from None

    async def _send_file_pieces(self, part: FileSlice, start: int) -> None:
        await self.writer.drain()
        if self.listener.tls:
            # TLS encrypts in user space: the verified bytes are read in bounded pieces (no second check)
            pieces = part.pieces(SEND_PIECE)
            while (piece := await asyncio.to_thread(next, pieces, None)) is not None:
                self.writer.write(piece)
                await self.writer.drain()
            return
        loop = asyncio.get_running_loop()
        transport = self.writer.transport
        pos, end = start, part.position + part.length
        with open(part.fd, "rb", buffering=0, closefd=False) as file:
            while pos < end:
                part.check_whole()
                n = _piece(part, pos)
                sent = await loop.sendfile(transport, file, pos, n)
                if sent != n:
                    raise Closing(f"a fetch response was cut short: {part.path} ended at {pos + sent} under a send "
                                  f"of [{part.position}, {end})")
                pos += n


def _piece(part: FileSlice, pos: int) -> int:
    """Bytes of ``part`` to send from ``pos``: to the end of its :data:`SEND_PIECE` piece (pieces counted from the
    slice's start, wherever a send that the socket took in part went on from)."""
    return min(SEND_PIECE - (pos - part.position) % SEND_PIECE, part.position + part.length - pos)
