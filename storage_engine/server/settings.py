"""The listener's settings from the broker keys (``listeners``, ``advertised.listeners``, TLS and SASL files),
checked at start with errors that name the key."""
from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storage_engine.errors import ConfigError

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class Listener:
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    def __str__(self) -> str:
        return f"{self.protocol}://{self.host}:{self.port}"


def parse_listeners(text: str, key: str = "listeners") -> list[Listener]:
    """``PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9094``: a security protocol per listener (Kafka's names;
    custom listener names are not supported), a host (empty: every interface) and a port (0: any free one)."""
    out = []
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        proto, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or proto.upper() not in PROTOCOLS:
            raise ConfigError(f"{key} = {text!r}: {item!r} is not <protocol>://<host>:<port> with a protocol of "
                              f"{', '.join(PROTOCOLS)}")
        try:
            number = int(port)
        except ValueError:
            raise ConfigError(f"{key} = {text!r}: port {port!r} of {item!r} is not a number") from None
        if not 0 <= number <= 65535:
            raise ConfigError(f"{key} = {text!r}: port {number} of {item!r} is not in [0, 65535]")
        host = host.strip("[]")
        out.append(Listener(proto.upper(), host, number))
    if not out:
        raise ConfigError(f"{key} = {text!r}: no listener")
    protos = [lst.protocol for lst in out]
    if len(set(protos)) != len(protos):
        raise ConfigError(f"{key} = {text!r}: each security protocol may have one listener")
    return out


def tls_context(server: Mapping[str, Any]) -> ssl.SSLContext:
    """A server TLS context from ``ssl.keystore.location`` (a PEM file with the certificate chain and the private
    key), ``ssl.key.password``, ``ssl.truststore.location`` (PEM CA certificates) and ``ssl.client.auth``."""
    keystore = server.get("ssl.keystore.location")
    if not keystore:
        raise ConfigError("an SSL or SASL_SSL listener needs ssl.keystore.location (a PEM file with the "
                          "certificate chain and private key)")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(keystore, password=server.get("ssl.key.password"))
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"ssl.keystore.location = {keystore!r}: cannot load the certificate and key: {exc}") from None
    auth = server.get("ssl.client.auth", "none")
    trust = server.get("ssl.truststore.location")
    if trust:
        try:
            ctx.load_verify_locations(cafile=trust)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"ssl.truststore.location = {trust!r}: cannot load: {exc}") from None
    if auth != "none":
        if not trust:
            raise ConfigError(f"ssl.client.auth = {auth} needs ssl.truststore.location")
        ctx.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    return ctx


def check_file(path: str | None, key: str) -> str:
    if not path:
        raise ConfigError(f"{key} is not set")
    if not os.path.isfile(path):
        raise ConfigError(f"{key} = {path!r}: no such file")
    return path
