"""The principal of a TLS connection whose client presented a certificate (``ssl.client.auth`` requested or
required), as Kafka's ``DefaultKafkaPrincipalBuilder`` makes it with the default ``ssl.principal.mapping.rules``:
``User:`` and the certificate's subject as Java's ``X500Principal.getName()`` prints it (RFC 2253): the RDNs from
the last to the first, ``,`` between them, ``+`` inside a multi-valued one, the attribute keywords CN, C, L, ST,
O, OU, STREET, DC and UID, the special characters escaped with ``\\``, e.g. ``User:CN=alice,OU=ops,O=Example,C=US``.
An attribute without a keyword is written as its OID with its DER value in hex, as Java does, for the two that
appear in client certificates (emailAddress, serialNumber). Without a certificate: ``User:ANONYMOUS``."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ANONYMOUS = "User:ANONYMOUS"

# Python's attribute names (ssl.getpeercert) -> the RFC 2253 keyword Java prints
_KEYWORDS = {"commonName": "CN", "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
             "organizationName": "O", "organizationalUnitName": "OU", "streetAddress": "STREET",
             "domainComponent": "DC", "userId": "UID"}
# the attributes Java writes as OID=#<DER hex>: (OID, DER string tag)
_BY_OID = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16), "serialNumber": ("2.5.4.5", 0x13)}


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (i == 0 and ch in "# ") or (i == len(value) - 1 and ch == " "):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def _der_hex(tag: int, value: str) -> str:
    data = value.encode("utf-8")
    n = len(data)
    length = bytes([n]) if n < 0x80 else (bytes([0x81, n]) if n < 0x100 else bytes([0x82, n >> 8, n & 0xFF]))
    return "#" + (bytes([tag]) + length + data).hex()


def _ava(name: str, value: str) -> str:
    if name in _KEYWORDS:
        return f"{_KEYWORDS[name]}={_escape(value)}"
    if name in _BY_OID:
        oid, tag = _BY_OID[name]
        return f"{oid}={_der_hex(tag, value)}"
    return f"{name}={_escape(value)}"


def subject_dn(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The RFC 2253 text of a subject as ``ssl.SSLSocket.getpeercert()`` gives it (RDNs in certificate order)."""
    return ",".join("+".join(_ava(name, value) for name, value in rdn) for rdn in reversed(subject))


def principal_of(peercert: Any) -> str:
    """``User:<subject DN>`` of a verified peer certificate (``getpeercert()``), else ``User:ANONYMOUS``."""
    if not peercert or not isinstance(peercert, dict) or not peercert.get("subject"):
        return ANONYMOUS
    return "User:" + subject_dn(peercert["subject"])
