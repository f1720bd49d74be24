"""A second baseline for the fetch rows: the least a request/response protocol with one request in flight costs.

The ``sendfile`` baseline streams the segment files down one connection without a pause: the sender and the reader
run side by side on the two cores and never wait for each other. A fetch cannot: the client asks, the broker answers
with at most ``max_bytes``, and only then does the client ask for the next bytes (librdkafka and the Java consumer keep
one fetch in flight per broker). This baseline is that exchange and nothing else, in a second process as the broker
is: the server (``python -m benchmarks.request_sendfile PATH...``, one connection at a time, a blocking socket with
``TCP_NODELAY``) reads a 12-byte request (a position in the files taken end to end, and at most how many bytes),
and answers under ``TCP_CORK`` with a 4-byte size and that many bytes of one file by ``os.sendfile``, as the broker
sends a fetch's verified bytes; the client (:func:`request_round`) sends one request at a time and receives each
answer whole into one buffer, as the bare Fetch client does, and reads no field of it.

So the broker's ratio to this row is what its own work per fetch costs (parsing the request, finding the bytes,
checking them, the response's fields, the event loop), and this row's ratio to the streaming baseline is what
asking costs.
"""
from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time

from .fetch_client import recv_exactly
from .harness import MIB, REPO, Sample, process_cpu_s

_REQUEST = struct.Struct(">qi")      # position in the files end to end, at most this many bytes
_SIZE = struct.Struct(">i")
SERVER = "the request/response sendfile server"


def _serve_connection(conn: socket.socket, files: list[tuple[int, int, int]]) -> None:
    """Answer ``conn``'s requests until it closes; ``files`` are (descriptor, first position, length)."""
    out = conn.fileno()
    request = bytearray(_REQUEST.size)
    view = memoryview(request)
    while True:
        got = 0
        while got < len(request):
            k = conn.recv_into(view[got:])
            if not k:
                return
            got += k
        position, most = _REQUEST.unpack(request)
        fd, first, length = next(f for f in files if f[1] <= position < f[1] + f[2])
        at = position - first
        n = min(most, length - at)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        os.write(out, _SIZE.pack(n))
        end = at + n
        while at < end:
            at += os.sendfile(out, fd, at, end - at)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)


def serve(paths: list[str]) -> None:
    """Listen on a loopback port (printed on stdout), answer one connection at a time."""
    files, position = [], 0
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        length = os.fstat(fd).st_size
        files.append((fd, position, length))
        position += length
    server = socket.create_server(("127.0.0.1", 0))
    print(server.getsockname()[1], flush=True)
    while True:
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            _serve_connection(conn, files)


class RequestServer:
    """The server as a child process (``with RequestServer(paths) as server``); ``cpu_s()`` is its CPU so far."""

    def __init__(self, paths: list[str]):
        self.paths = paths
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def __enter__(self) -> "RequestServer":
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.request_sendfile", *self.paths],
                                     cwd=REPO, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.proc.kill()
            raise RuntimeError(f"the request/response sendfile server did not start (printed {line!r})")
        self.port = int(line)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def cpu_s(self) -> float:
        assert self.proc is not None
        return process_cpu_s(self.proc.pid)


def request_round(server: RequestServer, size: int, per_request: int = MIB) -> Sample:
    """Read ``size`` bytes from ``server``, ``per_request`` bytes per request, one request in flight; the sample's
    CPU is this process's and the server's."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = memoryview(bytearray(per_request))
    head = memoryview(bytearray(_SIZE.size))
    server_before, cpu_before, start = server.cpu_s(), time.process_time(), time.perf_counter()
    position = 0
    try:
        while position < size:
            sock.sendall(_REQUEST.pack(position, per_request))
            recv_exactly(sock, head, _SIZE.size, SERVER)
            n = _SIZE.unpack(head)[0]
            if not 0 < n <= per_request:
                raise RuntimeError(f"the request/response sendfile server answered {n} bytes at {position}")
            recv_exactly(sock, buf, n, SERVER)
            position += n
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu_before
    finally:
        sock.close()
    return Sample(wall, cpu + server.cpu_s() - server_before)


if __name__ == "__main__":
    serve(sys.argv[1:])
