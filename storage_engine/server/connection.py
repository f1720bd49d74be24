"""One client connection: frames read one at a time and answered in order (Kafka mutes a connection while a
request is in flight), SASL before anything else on a SASL listener, and a malformed or oversized frame, an
unserved API or version, a request before authentication or a failed authentication closing that connection with
one log line: nothing from it is answered (but the failed SaslAuthenticate) or stored. Before authentication a
frame may not exceed :data:`MAX_UNAUTHENTICATED_BYTES` (Kafka's ``sasl.server.max.receive.size``), so a client
without credentials cannot make the broker buffer ``socket.request.max.bytes``. After a SaslHandshake v0 the SASL
tokens come as raw size-prefixed frames without Kafka headers (Kafka's ``handleSaslToken``); v1 wraps them in
SaslAuthenticate. A handler that fails on a request closes only that connection, with one line naming the request
and where it failed.

A response goes out part by part (:mod:`storage_engine.server.response_send`): a fetch's file slices with
``sendfile`` straight from the file, each piece checked first.

Limits (:mod:`storage_engine.server.limits`): a frame's bytes come from the broker's memory pool
(``queued.max.request.bytes``) before its body is read, into one buffer of exactly its size, and go back once its
request is answered; while the pool is short the connection reads nothing. A connection with no request for
``connections.max.idle.ms`` is closed, and so is one whose frame takes longer than
``socket.request.receive.timeout.ms`` to arrive from its first byte (or whose response is not taken within it),
each with one log line naming the key."""
from __future__ import annotations

import asyncio
import logging
import os
import traceback
from collections.abc import Mapping
from typing import Any

from storage_engine.segment.file_slice import FileSlice
from storage_engine.server import protocol
from storage_engine.server.broker import Broker
from storage_engine.server.eager import Started
from storage_engine.server.errors import ErrorCode
from storage_engine.server.handlers import API_VERSIONS, APIS, SASL_AUTHENTICATE, SASL_HANDSHAKE, SUPPORTED
from storage_engine.server.handlers.context import CloseConnection, Ctx
from storage_engine.server.response_send import Buffer, Closing, Part, ResponseSender
from storage_engine.server.responses.sasl import SaslAuthenticateResponse, SaslHandshakeResponse
from storage_engine.server.limits import Limits, MemoryPool
from storage_engine.server.sasl import AuthenticationFailed, Authenticator, Users
from storage_engine.server.settings import Listener
from storage_engine.server.peer import acl_host, principal_of

logger = logging.getLogger(__name__)
READ_AHEAD = 2                         # requests received ahead of the one being handled
MAX_UNAUTHENTICATED_BYTES = 524288     # Kafka's sasl.server.max.receive.size default
CHUNK = 256 * 1024                     # bytes copied from the stream into a frame's buffer at a time
SMALL_FRAME = 64 * 1024                # a frame up to this size is taken from the stream in one read (below its limit)


class Connection(ResponseSender):
    def __init__(self, broker: Broker, listener: Listener, advertised: tuple[str, int],
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter, users: Users | None,
                 limits: Limits | None = None, pool: MemoryPool | None = None):
        self.broker = broker
        self.listener = listener
        self.advertised = advertised
        self.reader = reader
        self.writer = writer
        self.users = users
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.ip = peer[0] if isinstance(peer, tuple) else str(peer)
        self.acl_host = acl_host(self.ip)      # the IP as Kafka's ACL hosts write it
        self.authenticated = not listener.sasl
        self.auth: Authenticator | None = None
        self._tls_principal: str | None = None     # the client certificate's, taken at the first request
        self.busy = False
        self.max_bytes: int = broker.config.server["socket.request.max.bytes"]
        self.current = "reading a request"     # what the connection is doing, for the log line of a failure
        self.raw_tokens = False                # after SaslHandshake v0: raw SASL tokens, no Kafka headers
        self.limits = limits or Limits.from_server(broker.config.server)
        self.pool = pool or MemoryPool(self.limits.queued_bytes)
        self.held = 0                          # pool bytes taken by this connection's frames not yet answered
        self._ahead_idle = True                # the read-ahead task has taken no byte of the frame it awaits
        self._idle_timer: asyncio.TimerHandle | None = None   # connections.max.idle.ms, one timer (_idle_check)
        self._idle_waiter: asyncio.Task[Any] | None = None    # the task waiting for a frame's first byte
        self._idle_fired = False               # the idle timer cancelled that wait
        self._loop = asyncio.get_running_loop()   # looked up once: each lookup is a getpid system call
        self.last_active = self._loop.time()

    async def _timed(self, coro: Any, timeout: float | None, what: str) -> Any:
        """``coro`` within ``timeout`` seconds (None: no limit), else :class:`Closing` naming ``what``. The timer
        is armed only if ``coro`` has to wait (:class:`~storage_engine.server.eager.Started`): a read whose bytes
        are buffered, a write the socket takes, finish at once, and most do."""
        if timeout is None:
            return await coro
        started = Started(coro)
        if started.done:
            return started.result()
        try:
            async with asyncio.timeout(timeout):
                return await started
        except TimeoutError:
            raise Closing(what) from None

    async def _first_byte(self) -> bytes:
        """The first byte of the next frame; :class:`Closing` once the connection has been idle (no request
        arriving, none being handled, nothing sent) for ``connections.max.idle.ms``. One timer per connection
        watches that (:meth:`_idle_check`), armed when a wait finds no byte and moved on when it fires early,
        rather than one armed and cancelled per request."""
        idle = self.limits.idle_s
        if idle is None:
            return await self.reader.readexactly(1)
        started = Started(self.reader.readexactly(1))
        if started.done:                                      # a request already buffered
            return started.result()
        loop = self._loop
        if self.last_active + idle <= loop.time() and not self.busy:
            started.close()
            raise Closing(f"idle for {idle * 1000:.0f} ms (connections.max.idle.ms)")
        task = asyncio.current_task(loop)
        assert task is not None
        self._idle_waiter = task
        if self._idle_timer is None:
            self._idle_timer = loop.call_at(max(self.last_active + idle, loop.time() + 0.05), self._idle_check)
        try:
            return await started                              # cancelled, it consumes nothing
        except asyncio.CancelledError:
            if self._idle_fired and task.uncancel() == 0:     # the idle timer's cancellation, no other
                raise Closing(f"idle for {idle * 1000:.0f} ms (connections.max.idle.ms)") from None
            raise
        finally:
            self._idle_waiter = None
            self._idle_fired = False

    def _idle_check(self) -> None:
        """The idle timer fired: end the wait for a first byte if the connection has been idle long enough (a
        request in flight is activity), else fire again when it would be; with no wait, the next wait arms it."""
        self._idle_timer = None
        waiter, idle = self._idle_waiter, self.limits.idle_s
        if waiter is None or idle is None:
            return
        loop = self._loop
        now = loop.time()
        if self.busy:
            self.last_active = now
        due = self.last_active + idle
        if due > now:
            self._idle_timer = loop.call_at(due, self._idle_check)
            return
        self._idle_fired = True
        waiter.cancel()

    def _late(self) -> str:
        return (f"a request frame took longer than {self.limits.receive_s} s to arrive "
                f"(socket.request.receive.timeout.ms)")

    async def _read_size(self) -> int:
        """The next frame's size prefix, under the idle and receive timeouts."""
        first = await self._first_byte()
        self._ahead_idle = False
        return protocol.frame_size(first + await self._timed(self.reader.readexactly(3), self.limits.receive_s,
                                                             self._late()))

    async def _read_frame(self) -> bytearray:
        size = await self._read_size()
        if size < 8 or size > self.max_bytes:
            raise Closing(f"request size {size} is outside [8, socket.request.max.bytes={self.max_bytes}]")
        if not self.authenticated and size > MAX_UNAUTHENTICATED_BYTES:
            raise Closing(f"request size {size} before SASL authentication is above "
                          f"{MAX_UNAUTHENTICATED_BYTES} (sasl.server.max.receive.size)")
        if not self.pool.fits_now(size) and self.pool.should_log_wait():
            logger.info("%s waits for memory: a request of %d bytes, %d of queued.max.request.bytes=%s in use",
                        self.peer, size, self.pool.used, self.pool.capacity)
        await self.pool.acquire(size)      # nothing more is read from this socket until the frame fits
        self.held += size
        if size <= SMALL_FRAME:
            # one read from the stream (which buffers that much anyway), copied into a writable buffer: the
            # Produce decoder leaves the records in the frame, where the append assigns their offsets
            frame = bytearray(await self._timed(self.reader.readexactly(size), self.limits.receive_s, self._late()))
        else:
            frame = await self._timed(self._read_body(size), self.limits.receive_s, self._late())
        self.last_active = self._loop.time()
        return frame

    async def _read_body(self, size: int) -> bytearray:
        """``size`` bytes into one buffer of exactly that size: the stream's own buffer never grows past its limit
        (a frame read whole through it would grow a second, reallocated copy of the frame)."""
        frame = bytearray(size)
        view = memoryview(frame)
        pos = 0
        while pos < size:
            chunk = await self.reader.read(min(size - pos, CHUNK))
            if not chunk:
                raise asyncio.IncompleteReadError(b"", size)
            view[pos:pos + len(chunk)] = chunk
            pos += len(chunk)
        view.release()
        return frame

    def _done_with(self, frame: Buffer) -> None:
        """The frame's request is answered: its bytes go back to the pool."""
        size = len(frame)
        self.held -= size
        self.pool.release(size)

    async def _read_ahead(self, queue: asyncio.Queue[bytearray | BaseException]) -> None:
        """Once authenticated, while a request waits: receive the next requests meanwhile (at most
        :data:`READ_AHEAD` waiting); they are still handled and answered one at a time, in order."""
        while True:
            try:
                self._ahead_idle = True
                # no local keeps a frame while the next one is awaited: an answered frame's memory goes at once
                await queue.put(await self._read_frame())
            except Exception as exc:   # noqa: BLE001 - handed to the handling loop, which closes the connection
                await queue.put(exc)
                return

    async def run(self) -> None:
        """Frames are read here, between requests, and a request is answered at once; only when its answer has to
        wait (a thread, the purgatory, a full socket) does a read-ahead task receive the next frames meanwhile,
        until it is idle again between frames with none waiting (then it is stopped: a request answered
        without waiting costs no hand-off between two tasks)."""
        queue: asyncio.Queue[bytearray | BaseException] = asyncio.Queue(READ_AHEAD)
        ahead: asyncio.Task[None] | None = None
        try:
            while True:
                if ahead is not None and queue.empty() and self._ahead_idle and not ahead.done():
                    ahead.cancel()                 # waiting for a frame's first byte: it has taken nothing
                    await asyncio.wait((ahead,))
                    ahead = None
                if ahead is not None:
                    item = await queue.get()
                    if isinstance(item, BaseException):
                        raise item
                    frame = item
                    del item
                elif self.raw_tokens:
                    await self._raw_token(await self._read_size())
                    continue
                else:
                    frame = await self._read_frame()
                self.busy = True
                try:
                    answering = Started(self._answer(frame))
                    del frame
                    if not answering.done:
                        if ahead is None and self.authenticated and not self.raw_tokens:
                            self._ahead_idle = True
                            ahead = asyncio.create_task(self._read_ahead(queue))
                        await answering
                    del answering
                finally:
                    self.busy = False
                    self.last_active = self._loop.time()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except CloseConnection as exc:
            logger.info("closing connection from %s on %s: %s", self.peer, self.listener, exc)
        except (protocol.MalformedRequest, Closing) as exc:
            self.broker.stats.malformed += 1
            logger.warning("closing connection from %s on %s: %s", self.peer, self.listener, _line(exc))
        except OSError as exc:     # a TLS record that does not decrypt, a socket error
            logger.warning("closing connection from %s on %s: %s", self.peer, self.listener, _line(exc))
        except Exception as exc:   # noqa: BLE001 - a handler's bug: this connection closes, the others go on
            self.broker.stats.errors += 1
            logger.error("closing connection from %s on %s: %s failed: %s: %s (at %s)", self.peer, self.listener,
                         self.current, type(exc).__name__, _line(exc), _where(exc))
        finally:
            if ahead is not None:
                ahead.cancel()
                try:
                    await ahead
                except BaseException:   # noqa: BLE001 - it ended with the connection; its error was handled
                    pass
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self.writer.close()
            if self.held:                  # frames read ahead and never answered
                self.pool.release(self.held)
                self.held = 0

    async def _answer(self, frame: bytearray) -> None:
        """Handle one request and send its answer (if any) within the receive timeout."""
        out = await self.handle(frame)
        self._done_with(frame)
        del frame
        if out is not None:
            await self._timed(self._send(out), self.limits.receive_s,
                              f"a response was not taken within {self.limits.receive_s} s "
                              f"(socket.request.receive.timeout.ms)")

    async def handle(self, frame: Buffer) -> list[Part] | None:
        self.current = "decoding a request"
        request = protocol.decode_request(frame, SUPPORTED)
        key = request.api_key
        self.current = f"{APIS[key].name} v{request.api_version} (correlation id {request.correlation_id})"
        if not self.authenticated and key not in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
            raise Closing(f"{APIS[key].name} before SASL authentication")
        if key == SASL_HANDSHAKE:
            answer = self._handshake(request.body)
            self.raw_tokens = answer["error_code"] == ErrorCode.none and request.api_version == 0
            return self._encode(request, answer)
        if key == SASL_AUTHENTICATE:
            return self._authenticate(request)
        api = APIS[key]
        assert api.handler is not None
        ctx = Ctx(self.broker, request, self.advertised[0], self.advertised[1], self.peer, self.principal,
                  self.acl_host)
        result = await api.handler(ctx, request.body)
        if result is None:
            return None
        version = 0 if request.body is None else request.api_version
        return self._encode(request, result, version)

    @property
    def principal(self) -> str:
        """Kafka's principal of this connection: ``User:<name>`` once SASL authenticated it; on an SSL listener
        ``User:<the client certificate's subject DN>`` (:mod:`storage_engine.server.peer`); else
        ``User:ANONYMOUS``."""
        if self.auth is not None and self.auth.done and self.auth.user:
            return f"User:{self.auth.user}"
        if self.listener.tls and not self.listener.sasl:
            if self._tls_principal is None:
                self._tls_principal = principal_of(self.writer.get_extra_info("peercert"))
            return self._tls_principal
        return "User:ANONYMOUS"

    def _encode(self, request: protocol.Request, result: Mapping[str, object] | protocol.Encoded,
                version: int | None = None) -> list[Part]:
        if isinstance(result, protocol.Encoded):     # a handler that encodes its own response (Metadata, Fetch)
            return list(protocol.frame_encoded(request, result))
        cls = protocol.response_class(request.api_key, request.api_version if version is None else version)
        return protocol.encode_response_parts(request, protocol.build(cls, result))

    def _handshake(self, body: Any) -> SaslHandshakeResponse:
        enabled = tuple(self.broker.config.server["sasl.enabled.mechanisms"])
        if not self.listener.sasl:
            return {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": ()}
        if self.auth is not None or self.authenticated:
            raise Closing("a second SaslHandshake on one connection")
        if body.mechanism not in enabled or self.users is None:
            return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": enabled}
        self.auth = Authenticator(body.mechanism, self.users)
        return {"error_code": ErrorCode.none, "mechanisms": enabled}

    async def _raw_token(self, size: int) -> None:
        """One SASL token of a SaslHandshake v0 exchange (Kafka's ``handleSaslToken`` without Kafka headers):
        size-prefixed token in, size-prefixed token out; a failure closes the connection without an answer."""
        assert self.auth is not None
        if not 0 <= size <= MAX_UNAUTHENTICATED_BYTES:
            raise Closing(f"SASL token size {size} is outside [0, {MAX_UNAUTHENTICATED_BYTES}]")
        token = await self._timed(self.reader.readexactly(size), self.limits.receive_s, self._late())
        self.current = f"a {self.auth.mechanism} token after SaslHandshake v0"
        try:
            answer = self.auth.step(token)
        except AuthenticationFailed as exc:
            raise Closing(f"{self.auth.mechanism} authentication failed (SaslHandshake v0)"
                          f"{' for user ' + repr(self.auth.user) if self.auth.user else ''}: {exc}") from None
        if self.auth.done:
            self.authenticated, self.raw_tokens = True, False
            logger.info("%s authenticated as %s with %s on %s", self.peer, self.auth.user, self.auth.mechanism,
                        self.listener)
        self.writer.write(len(answer).to_bytes(4, "big") + answer)
        await self.writer.drain()

    def _authenticate(self, request: protocol.Request) -> list[Part]:
        if self.auth is None or self.authenticated:
            raise Closing("SaslAuthenticate without a SaslHandshake first")
        try:
            token = self.auth.step(bytes(request.body.auth_bytes))
        except AuthenticationFailed as exc:
            failed: SaslAuthenticateResponse = {"error_code": ErrorCode.sasl_authentication_failed,
                                                "error_message": str(exc), "auth_bytes": b"", "session_lifetime": 0}
            self.writer.writelines(_buffers(self._encode(request, failed)))
            raise Closing(f"{self.auth.mechanism} authentication failed"
                          f"{' for user ' + repr(self.auth.user) if self.auth.user else ''}: {exc}") from None
        if self.auth.done:
            self.authenticated = True
            logger.info("%s authenticated as %s with %s on %s", self.peer, self.auth.user, self.auth.mechanism,
                        self.listener)
        done: SaslAuthenticateResponse = {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": token,
                                          "session_lifetime": 0}
        return self._encode(request, done)


def _buffers(parts: list[Part]) -> list[Buffer]:
    """The parts of a response that has no records (so no file slice)."""
    out = [p for p in parts if not isinstance(p, FileSlice)]
    assert len(out) == len(parts), "a file slice in a response written without sendfile"
    return out


def _where(exc: BaseException) -> str:
    """``file:line in function`` of the innermost frame of ``exc``'s traceback."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{os.path.basename(last.filename)}:{last.lineno} in {last.name}"


def _line(exc: BaseException) -> str:
    """``exc`` as one line of at most 500 characters (client bytes in a message cannot break the log line)."""
    return " ".join(str(exc).split())[:500] or type(exc).__name__
