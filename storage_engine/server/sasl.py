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
        reason = " ".join(str(exc).split())       # YAML errors span lines: the CLI's error is one line
        raise ConfigError(f"sasl.credentials.file = {path!r}: cannot read: {reason}") from None
    users = data.get("users") if isinstance(data, dict) else None
    if not isinstance(users, dict) or not users:
        raise ConfigError(f"sasl.credentials.file = {path!r}: expected 'users:' mapping user names to credentials")
    passwords: dict[str, str] = {}
    scram: dict[tuple[str, str], ScramCredential] = {}
    for name, entry in users.items():
        where = f"sasl.credentials.file {path!r}, user {name!r}"
        if not isinstance(name, str) or not name or not isinstance(entry, dict) or not entry:
            raise ConfigError(f"{where}: a user is a name mapped to {{password: ...}} or SCRAM credentials")
        for key, value in entry.items():
            if not isinstance(key, str):
                raise ConfigError(f"{where}: unknown key {key!r} (password, scram-sha-256, scram-sha-512)")
            if key == "password":
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"{where}: password must be a non-empty string")
                passwords[name] = value
                for mech in _HASHES:
                    scram.setdefault((name, mech), scram_credential(value, mech))
            elif key.upper() in _HASHES:
                try:
                    cred = ScramCredential(base64.b64decode(value["salt"], validate=True), int(value["iterations"]),
                                           base64.b64decode(value["stored_key"], validate=True),
                                           base64.b64decode(value["server_key"], validate=True))
                except (TypeError, KeyError, ValueError) as exc:
                    raise ConfigError(f"{where}: {key} needs salt, iterations, stored_key, server_key in base64 "
                                      f"({type(exc).__name__}: {exc})") from None
                if cred.iterations < MIN_ITERATIONS:
                    raise ConfigError(f"{where}: {key} iterations {cred.iterations} < {MIN_ITERATIONS}")
                size = hashlib.new(_HASHES[key.upper()]).digest_size
                if not cred.salt or len(cred.stored_key) != size or len(cred.server_key) != size:
                    raise ConfigError(f"{where}: {key} needs a non-empty salt and a stored_key and server_key of "
                                      f"{size} bytes each")
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
        self._gs2_header = ""
        self._cred: ScramCredential | None = None

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
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise AuthenticationFailed("PLAIN token must be UTF-8") from None
        if authzid and authzid != user:
            raise AuthenticationFailed("authorization id must be empty or equal to the user")
        expected = self.users.passwords.get(user)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        self.done, self.user = True, user
        return b""

    def _scram(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("SCRAM messages must be UTF-8") from None
        algo = _HASHES[self.mechanism]
        if self._state == "first":
            # gs2-header "n," [ "a=" authzid ] "," then client-first-message-bare "n=user,r=nonce[,extensions]"
            parts = text.split(",", 2)
            if len(parts) != 3 or parts[0] != "n" or (parts[1] and not parts[1].startswith("a=")):
                raise AuthenticationFailed("SCRAM client-first must start with the GS2 header 'n,,' or 'n,a=<user>,'")
            bare = parts[2]
            fields = bare.split(",")
            if len(fields) < 2 or not fields[0].startswith("n=") or not fields[1].startswith("r=") \
                    or len(fields[1]) < 3:
                raise AuthenticationFailed("SCRAM client-first-message-bare must be 'n=<user>,r=<nonce>'")
            user = _saslname(fields[0][2:])
            authzid = _saslname(parts[1][2:]) if parts[1] else None
            if user is None or (parts[1] and authzid != user):
                raise AuthenticationFailed("Authentication failed: the authorization id must be empty or the user")
            cred = self.users.scram.get((user, self.mechanism))
            if cred is None:
                raise AuthenticationFailed("Authentication failed: Invalid user credentials")
            self.user, self._cred = user, cred
            self._gs2_header = f"{parts[0]},{parts[1]},"
            self._nonce = fields[1][2:] + base64.b64encode(secrets.token_bytes(18)).decode()
            self._auth_first = bare
            self._server_first = (f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},"
                                  f"i={cred.iterations}")
            self._state = "final"
            return self._server_first.encode()
        # client-final-message: "c=<b64 gs2 header>,r=<nonce>[,extensions],p=<b64 proof>" (the proof last)
        without_proof, sep, proof_text = text.rpartition(",p=")
        fields = without_proof.split(",")
        if not sep or len(fields) < 2 or not fields[0].startswith("c=") or not fields[1].startswith("r="):
            raise AuthenticationFailed("SCRAM client-final must be 'c=<channel binding>,r=<nonce>,p=<proof>'")
        # Kafka's ScramSaslServer accepts a nonce that ends with the server's: older librdkafka (2.0.2, which kcat here
        # links) sends its own nonce again before the combined one (the proof covers the message as sent)
        if not fields[1][2:].endswith(self._nonce):
            raise AuthenticationFailed("Authentication failed: Invalid client nonce")
        if fields[0][2:] != base64.b64encode(self._gs2_header.encode()).decode():
            raise AuthenticationFailed("Authentication failed: channel binding does not match the GS2 header")
        auth_message = f"{self._auth_first},{self._server_first},{without_proof}".encode()
        cred = self._cred
        assert cred is not None
        signature = hmac.new(cred.stored_key, auth_message, algo).digest()
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            raise AuthenticationFailed("Authentication failed: Invalid client proof") from None
        client_key = bytes(a ^ b for a, b in zip(proof, signature)) if len(proof) == len(signature) else b""
        if not hmac.compare_digest(hashlib.new(algo, client_key).digest(), cred.stored_key):
            raise AuthenticationFailed("Authentication failed: Invalid user credentials")
        self.done = True
        server_signature = hmac.new(cred.server_key, auth_message, algo).digest()
        return f"v={base64.b64encode(server_signature).decode()}".encode()


def _saslname(text: str) -> str | None:
    """A SCRAM saslname decoded (``=2C`` is ',', ``=3D`` is '='); None if another '=' escape is in it."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "=":
            escape = text[i:i + 3]
            if escape not in ("=2C", "=3D"):
                return None
            out.append("," if escape == "=2C" else "=")
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
