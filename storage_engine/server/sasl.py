"""SASL for the SASL_PLAINTEXT and SASL_SSL listeners (Kafka's ``SaslServerAuthenticator``): PLAIN (RFC 4616) and
SCRAM-SHA-256/512 (RFC 5802/7677), with users from ``sasl.credentials.file``::

    users:
      alice: {password: alice-secret}                      # PLAIN and SCRAM (credentials derived at load)
      bob:   {scram-sha-256: {salt: <b64>, iterations: 4096, stored_key: <b64>, server_key: <b64>}}

A SCRAM entry stores only Kafka's SCRAM credential (salt, iterations >= 4096, StoredKey, ServerKey); a
``password`` entry serves PLAIN and both SCRAM mechanisms. Passwords compare in constant time.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

import yaml

from storage_engine.durable import read_regular_file
from storage_engine.errors import ConfigError

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS = 4096
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


class AuthenticationFailed(Exception):
    pass


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def scram_credential(password: str, mechanism: str, *, salt: bytes | None = None,
                     iterations: int = MIN_ITERATIONS) -> ScramCredential:
    algo = _HASHES[mechanism]
    salt = salt if salt is not None else secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac(algo, password.encode("utf-8"), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    return ScramCredential(salt, iterations, hashlib.new(algo, client_key).digest(),
                           hmac.new(salted, b"Server Key", algo).digest())


@dataclass
class Users:
    passwords: dict[str, str]
    scram: dict[tuple[str, str], ScramCredential]


def load_users(path: str) -> Users:
    try:
        data = yaml.safe_load(read_regular_file(path, 4 * 1024 * 1024).decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"sasl.credentials.file = {path!r}: no such file") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"sasl.credentials.file = {path!r}: cannot read: {exc}") from None
    users = data.get("users") if isinstance(data, dict) else None
    if not isinstance(users, dict) or not users:
        raise ConfigError(f"sasl.credentials.file = {path!r}: expected 'users:' mapping user names to credentials")
    passwords: dict[str, str] = {}
    scram: dict[tuple[str, str], ScramCredential] = {}
    for name, entry in users.items():
        where = f"sasl.credentials.file {path!r}, user {name!r}"
        if not isinstance(name, str) or not name or not isinstance(entry, dict):
            raise ConfigError(f"{where}: a user is a name mapped to {{password: ...}} or SCRAM credentials")
        for key, value in entry.items():
            if key == "password":
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"{where}: password must be a non-empty string")
                passwords[name] = value
                for mech in _HASHES:
                    scram.setdefault((name, mech), scram_credential(value, mech))
            elif key.upper() in _HASHES:
                try:
                    cred = ScramCredential(base64.b64decode(value["salt"]), int(value["iterations"]),
                                           base64.b64decode(value["stored_key"]), base64.b64decode(value["server_key"]))
                except (TypeError, KeyError, ValueError) as exc:
                    raise ConfigError(f"{where}: {key} needs salt, iterations, stored_key, server_key ({exc})") from None
                if cred.iterations < MIN_ITERATIONS:
                    raise ConfigError(f"{where}: {key} iterations {cred.iterations} < {MIN_ITERATIONS}")
                scram[(name, key.upper())] = cred
            else:
                raise ConfigError(f"{where}: unknown key {key!r} (password, scram-sha-256, scram-sha-512)")
    return Users(passwords, scram)


class Authenticator:
    """One connection's exchange: :meth:`step` takes a client token and returns the server token; ``done`` once
    the client is authenticated (``user`` names it). Any failure raises :class:`AuthenticationFailed`."""

    def __init__(self, mechanism: str, users: Users):
        self.mechanism = mechanism
        self.users = users
        self.done = False
        self.user: str | None = None
        self._state = "first"
        self._nonce = ""
        self._auth_first = ""
        self._server_first = ""

    def step(self, token: bytes) -> bytes:
        if self.done:
            raise AuthenticationFailed("already authenticated")
        if self.mechanism == "PLAIN":
            return self._plain(token)
        return self._scram(token)

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise AuthenticationFailed("PLAIN token must be authzid NUL user NUL password")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if authzid and authzid != user:
            raise AuthenticationFailed("authorization id must be empty or equal to the user")
        expected = self.users.passwords.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.done, self.user = True, user
        return b""

    def _scram(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        algo = _HASHES[self.mechanism]
        if self._state == "first":
            if not text.startswith("n,"):
                raise AuthenticationFailed("SCRAM client-first must start with the GS2 header 'n,'")
            bare = text.split(",", 2)[2] if text.count(",") >= 2 else ""
            attrs = dict(a.split("=", 1) for a in bare.split(",") if "=" in a)
            user = attrs.get("n", "").replace("=2C", ",").replace("=3D", "=")
            cred = self.users.scram.get((user, self.mechanism))
            if cred is None or "r" not in attrs:
                raise AuthenticationFailed("Authentication failed: Invalid user credentials")
            self.user, self._cred = user, cred
            self._nonce = attrs["r"] + base64.b64encode(secrets.token_bytes(18)).decode()
            self._auth_first = bare
            self._server_first = (f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},"
                                  f"i={cred.iterations}")
            self._state = "final"
            return self._server_first.encode()
        attrs = dict(a.split("=", 1) for a in text.split(",") if "=" in a)
        if attrs.get("r") != self._nonce or "p" not in attrs:
            raise AuthenticationFailed("Authentication failed: Invalid client nonce or proof")
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._auth_first},{self._server_first},{without_proof}".encode()
        cred = self._cred
        signature = hmac.new(cred.stored_key, auth_message, algo).digest()
        try:
            proof = base64.b64decode(attrs["p"])
        except ValueError:
            raise AuthenticationFailed("Authentication failed: Invalid client proof") from None
        client_key = bytes(a ^ b for a, b in zip(proof, signature)) if len(proof) == len(signature) else b""
        if not hmac.compare_digest(hashlib.new(algo, client_key).digest(), cred.stored_key):
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self.done = True
        server_signature = hmac.new(cred.server_key, auth_message, algo).digest()
        return f"v={base64.b64encode(server_signature).decode()}".encode()


