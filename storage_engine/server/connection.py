"""One client connection: frames read one at a time and answered in order (Kafka mutes a connection while a
request is in flight), SASL before anything else on a SASL listener, and a malformed or oversized frame, an
unserved API or version, or a request before authentication closing that connection with one log line: nothing
from it is answered or stored."""
from __future__ import annotations

import asyncio
import logging
from typing import Any

from storage_engine.server import protocol
from storage_engine.server.broker import Broker
from storage_engine.server.handlers import API_VERSIONS, APIS, SASL_AUTHENTICATE, SASL_HANDSHAKE, SUPPORTED
from storage_engine.server.handlers.context import Ctx
from storage_engine.server.sasl import AuthenticationFailed, Authenticator, Users
from storage_engine.server.settings import Listener

logger = logging.getLogger(__name__)


class Closing(Exception):
    """Close the connection after logging this one line."""


class Connection:
    def __init__(self, broker: Broker, listener: Listener, advertised: tuple[str, int],
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter, users: Users | None):
        self.broker = broker
        self.listener = listener
        self.advertised = advertised
        self.reader = reader
        self.writer = writer
        self.users = users
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.ip = peer[0] if isinstance(peer, tuple) else str(peer)
        self.authenticated = not listener.sasl
        self.auth: Authenticator | None = None
        self.busy = False
        self.max_bytes: int = broker.config.server["socket.request.max.bytes"]

    async def run(self) -> None:
        try:
            while True:
                prefix = await self.reader.readexactly(4)
                size = protocol.frame_size(prefix)
                if size < 8 or size > self.max_bytes:
                    raise Closing(f"request size {size} is outside [8, socket.request.max.bytes={self.max_bytes}]")
                frame = await self.reader.readexactly(size)
                self.busy = True
                try:
                    out = await self.handle(frame)
                    if out is not None:
                        self.writer.write(out)
                        await self.writer.drain()
                finally:
                    self.busy = False
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except protocol.MalformedRequest as exc:
            self.broker.stats.malformed += 1
            logger.warning("closing connection from %s on %s: %s", self.peer, self.listener, exc)
        except Closing as exc:
            self.broker.stats.malformed += 1
            logger.warning("closing connection from %s on %s: %s", self.peer, self.listener, exc)
        finally:
            self.writer.close()

    async def handle(self, frame: bytes) -> bytes | None:
        request = protocol.decode_request(frame, SUPPORTED)
        key = request.api_key
        if not self.authenticated and key not in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE):
            raise Closing(f"{APIS[key].name} before SASL authentication")
        if key == SASL_HANDSHAKE:
            return self._encode(request, self._handshake(request.body))
        if key == SASL_AUTHENTICATE:
            return self._authenticate(request)
        api = APIS[key]
        assert api.handler is not None
        ctx = Ctx(self.broker, request, self.advertised[0], self.advertised[1], self.peer)
        result = await api.handler(ctx, request.body)
        if result is None:
            return None
        version = 0 if request.body is None else request.api_version
        return self._encode(request, result, version)

    def _encode(self, request: protocol.Request, result: dict[str, Any], version: int | None = None) -> bytes:
        cls = protocol.response_class(request.api_key, request.api_version if version is None else version)
        return protocol.encode_response(request, protocol.build(cls, result))

    def _handshake(self, body: Any) -> dict[str, Any]:
        enabled = tuple(self.broker.config.server["sasl.enabled.mechanisms"])
        if not self.listener.sasl:
            return {"error_code": 34, "mechanisms": ()}
        if self.auth is not None or self.authenticated:
            raise Closing("a second SaslHandshake on one connection")
        if body.mechanism not in enabled or self.users is None:
            return {"error_code": 33, "mechanisms": enabled}
        self.auth = Authenticator(body.mechanism, self.users)
        return {"error_code": 0, "mechanisms": enabled}

    def _authenticate(self, request: protocol.Request) -> bytes:
        if self.auth is None or self.authenticated:
            raise Closing("SaslAuthenticate without a SaslHandshake first")
        try:
            token = self.auth.step(bytes(request.body.auth_bytes))
        except AuthenticationFailed as exc:
            logger.warning("authentication of %s on %s failed: %s", self.peer, self.listener, exc)
            self.writer.write(self._encode(request, {"error_code": 58, "error_message": str(exc),
                                                     "auth_bytes": b"", "session_lifetime": 0}))
            raise Closing("SASL authentication failed") from None
        if self.auth.done:
            self.authenticated = True
            logger.info("%s authenticated as %s with %s on %s", self.peer, self.auth.user, self.auth.mechanism,
                        self.listener)
        return self._encode(request, {"error_code": 0, "error_message": None, "auth_bytes": token,
                                      "session_lifetime": 0})
