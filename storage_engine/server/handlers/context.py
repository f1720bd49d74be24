"""What a handler gets: the broker, the request and the connection it came on."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage_engine.server.broker import Broker
from storage_engine.server.protocol import Request


class CloseConnection(Exception):
    """Close this connection after logging this line, without an answer: how a broker tells a client that expects
    no response (a Produce with acks=0) that its request failed, as Kafka does."""


@dataclass
class Ctx:
    broker: Broker
    request: Request
    host: str                 # advertised host and port of the listener the connection came on
    port: int
    peer: str
    principal: str = "User:ANONYMOUS"   # Kafka's principal: User:<SASL user>, or User:ANONYMOUS without SASL
    client_host: str = ""               # the client's IP, as ACL hosts name it

    @property
    def api_name(self) -> str:
        from storage_engine.server.handlers import APIS
        api = APIS.get(self.request.api_key)
        return api.name if api is not None else str(self.request.api_key)

    @property
    def version(self) -> int:
        return self.request.api_version


def has(body: Any, name: str) -> bool:
    return name in getattr(type(body), "__dataclass_fields__", {})
