"""Who the peer of a connection is, as Kafka's ACLs name it.

The host: the client's IP as Java's ``InetAddress.getHostAddress()`` writes it (:func:`acl_host`): IPv4 dotted,
an IPv4-mapped IPv6 address as its IPv4 (Java makes it an ``Inet4Address``), other IPv6 addresses as eight
hexadecimal groups without zero compression (``0:0:0:0:0:0:0:1``, not ``::1``), so an ACL written for a Kafka
broker matches here.

The principal of a TLS connection whose client presented a certificate (``ssl.client.auth`` requested or
required), as Kafka's ``DefaultKafkaPrincipalBuilder`` makes it with the default ``ssl.principal.mapping.rules``:
``User:`` and the certificate's subject as Java's ``X500Principal.getName()`` prints it (RFC 2253): the RDNs from
the last to the first, ``,`` between them, ``+`` inside a multi-valued one, the attribute keywords CN, C, L, ST,
O, OU, STREET, DC and UID, the special characters escaped with ``\\``, e.g. ``User:CN=alice,OU=ops,O=Example,C=US``.
An attribute without a keyword is written as its OID with its DER value in hex, as Java does, for the two that
appear in client certificates (emailAddress, serialNumber). Without a certificate: ``User:ANONYMOUS``."""
from __future__ import annotations

import ipaddress
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


def acl_host(ip: str) -> str:
    """The client IP as Kafka's ACLs compare it (Java's ``getHostAddress``); anything not an IP as it is."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return ip
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        text = ":".join(f"{int(group, 16):x}" for group in addr.exploded.split(":"))
        return text + ("%" + ip.split("%", 1)[1] if "%" in ip else "")
    return str(addr)
