"""What a handler gets: the broker, the request and the connection it came on."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage_engine.server.broker import Broker
from storage_engine.server.protocol import Request


@dataclass
class Ctx:
    broker: Broker
    request: Request
    host: str                 # advertised host and port of the listener the connection came on
    port: int
    peer: str

    @property
    def version(self) -> int:
        return self.request.api_version


def has(body: Any, name: str) -> bool:
    return name in getattr(type(body), "__dataclass_fields__", {})
