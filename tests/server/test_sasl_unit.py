"""The SASL authenticator in process: PLAIN tokens (RFC 4616) and SCRAM-SHA-256/512 exchanges (RFC 5802/7677)
driven by a client written here from the RFC, and the credentials file."""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path

import pytest
import yaml

from storage_engine.errors import ConfigError
from storage_engine.server.sasl import AuthenticationFailed, Authenticator, Users, load_users, scram_credential

pytestmark = pytest.mark.unit

ALGO = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class ScramClient:
    """RFC 5802 section 3, client side."""

    def __init__(self, user: str, password: str, mechanism: str, nonce: str | None = None, authzid: str = ""):
        self.user, self.password, self.algo = user, password, ALGO[mechanism]
        self.nonce = nonce or b64(os.urandom(18))
        self.gs2 = f"n,{'a=' + authzid if authzid else ''},"

    def first(self) -> bytes:
        name = self.user.replace("=", "=3D").replace(",", "=2C")
        self.bare = f"n={name},r={self.nonce}"
        return (self.gs2 + self.bare).encode()

    def final(self, server_first: bytes, *, nonce: str | None = None, channel: str | None = None) -> bytes:
        self.server_first = server_first.decode()
        attrs = dict(a.split("=", 1) for a in self.server_first.split(","))
        assert attrs["r"].startswith(self.nonce) and len(attrs["r"]) > len(self.nonce)
        salted = hashlib.pbkdf2_hmac(self.algo, self.password.encode(), base64.b64decode(attrs["s"]),
                                     int(attrs["i"]))
        without_proof = f"c={channel or b64(self.gs2.encode())},r={attrs['r'] if nonce is None else nonce}"
        self.auth_message = f"{self.bare},{self.server_first},{without_proof}".encode()
        client_key = hmac.new(salted, b"Client Key", self.algo).digest()
        stored_key = hashlib.new(self.algo, client_key).digest()
        signature = hmac.new(stored_key, self.auth_message, self.algo).digest()
        self.server_key = hmac.new(salted, b"Server Key", self.algo).digest()
        self.proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={b64(self.proof)}".encode()

    def server_signature(self) -> bytes:
        return f"v={b64(hmac.new(self.server_key, self.auth_message, self.algo).digest())}".encode()


def test_the_client_here_matches_rfc_7677():
    """The test client reproduces RFC 7677's SCRAM-SHA-256 example (so the server is checked against the RFC)."""
    client = ScramClient("user", "pencil", "SCRAM-SHA-256", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert client.server_signature() == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.fixture
def users() -> Users:
    scram = {(u, m): scram_credential(p, m) for u, p in (("alice", "alice-pw"), ("a,b=c", "odd-pw")) for m in ALGO}
    scram[("bob", "SCRAM-SHA-512")] = scram_credential("bob-pw", "SCRAM-SHA-512", iterations=8192)
    return Users({"alice": "alice-pw", "a,b=c": "odd-pw"}, scram)


# -- PLAIN -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("token", [b"\0alice\0alice-pw", b"alice\0alice\0alice-pw"])
def test_plain_good(users, token):
    auth = Authenticator("PLAIN", users)
    assert auth.step(token) == b""
    assert auth.done and auth.user == "alice"
    with pytest.raises(AuthenticationFailed):
        auth.step(token)            # once done, no more tokens


@pytest.mark.parametrize("token", [b"\0alice\0wrong", b"\0alice\0", b"\0nobody\0alice-pw", b"\0bob\0bob-pw",
                                   b"\0alice\0alice-pw\0"[:-1] + b"x", b"\0ALICE\0alice-pw", b"\0alice\0ALICE-PW"])
def test_plain_bad_credentials(users, token):
    auth = Authenticator("PLAIN", users)
    with pytest.raises(AuthenticationFailed, match="Invalid username or password"):
        auth.step(token)
    assert not auth.done and auth.user is None


@pytest.mark.parametrize("token", [b"", b"alice", b"\0alice", b"\0alice\0alice-pw\0", b"\0\0\0\0",
                                   b"bob\0alice\0alice-pw", b"\0alice\0alice-pw\xff", b"\xff\0alice\0alice-pw"])
def test_plain_malformed(users, token):
    auth = Authenticator("PLAIN", users)
    with pytest.raises(AuthenticationFailed):
        auth.step(token)
    assert not auth.done


# -- SCRAM -----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mechanism", list(ALGO))
@pytest.mark.parametrize("user,password", [("alice", "alice-pw"), ("a,b=c", "odd-pw")])
def test_scram_exchange(users, mechanism, user, password):
    auth = Authenticator(mechanism, users)
    client = ScramClient(user, password, mechanism)
    server_first = auth.step(client.first())
    assert not auth.done
    attrs = dict(a.split("=", 1) for a in server_first.decode().split(","))
    assert attrs["i"] == "4096" and base64.b64decode(attrs["s"])
    server_final = auth.step(client.final(server_first))
    assert server_final == client.server_signature()
    assert auth.done and auth.user == user


def test_scram_stored_credential_and_authzid(users):
    auth = Authenticator("SCRAM-SHA-512", users)
    client = ScramClient("bob", "bob-pw", "SCRAM-SHA-512", authzid="bob")
    server_first = auth.step(client.first())
    assert b",i=8192" in server_first
    assert auth.step(client.final(server_first)) == client.server_signature()
    assert auth.done and auth.user == "bob"


def test_scram_nonce_repeated_in_front_is_accepted(users):
    """Older librdkafka (2.0.2) sends its own nonce again before the combined one; Kafka accepts a client-final nonce
    that ends with the server's."""
    auth = Authenticator("SCRAM-SHA-256", users)
    client = ScramClient("alice", "alice-pw", "SCRAM-SHA-256")
    server_first = auth.step(client.first())
    combined = dict(a.split("=", 1) for a in server_first.decode().split(","))["r"]
    assert auth.step(client.final(server_first, nonce=client.nonce + combined)) == client.server_signature()
    assert auth.done


@pytest.mark.parametrize("mechanism", list(ALGO))
def test_scram_wrong_password_is_a_wrong_proof(users, mechanism):
    auth = Authenticator(mechanism, users)
    client = ScramClient("alice", "not-the-password", mechanism)
    server_first = auth.step(client.first())
    with pytest.raises(AuthenticationFailed, match="Invalid user credentials"):
        auth.step(client.final(server_first))
    assert not auth.done


def test_scram_tampered_proof(users):
    auth = Authenticator("SCRAM-SHA-256", users)
    client = ScramClient("alice", "alice-pw", "SCRAM-SHA-256")
    final = client.final(auth.step(client.first()))
    without, _, proof = final.decode().rpartition(",p=")
    raw = bytearray(base64.b64decode(proof))
    raw[0] ^= 1
    with pytest.raises(AuthenticationFailed):
        auth.step(f"{without},p={b64(bytes(raw))}".encode())
    assert not auth.done


@pytest.mark.parametrize("nonce", ["someone-else", "", "PREFIX"])
def test_scram_wrong_nonce(users, nonce):
    auth = Authenticator("SCRAM-SHA-256", users)
    client = ScramClient("alice", "alice-pw", "SCRAM-SHA-256")
    server_first = auth.step(client.first())
    combined = dict(a.split("=", 1) for a in server_first.decode().split(","))["r"]
    wrong = combined + "x" if nonce == "PREFIX" else nonce      # the server's nonce must end the client's
    with pytest.raises(AuthenticationFailed, match="nonce|client-final"):
        auth.step(client.final(server_first, nonce=wrong))
    assert not auth.done


@pytest.mark.parametrize("final", [
    "c=biws,r={r}",                              # no proof
    "p=AAAA,r={r}",                              # proof first, no c=
    "r={r},c=biws,p=AAAA",                       # attributes out of order
    "c=biws,r={r},p=%%%%",                       # proof not base64
    "c=biws,r={r},p=AAAA",                       # proof of the wrong length
    "c=eSws,r={r},p={p}",                        # channel binding of 'y,,', not the header the client sent
    "",
])
def test_scram_malformed_client_final(users, final):
    auth = Authenticator("SCRAM-SHA-256", users)
    client = ScramClient("alice", "alice-pw", "SCRAM-SHA-256")
    server_first = auth.step(client.first())
    good = client.final(server_first).decode()
    r = dict(a.split("=", 1) for a in server_first.decode().split(","))["r"]
    with pytest.raises(AuthenticationFailed):
        auth.step(final.format(r=r, p=good.rpartition(",p=")[2]).encode())
    assert not auth.done


@pytest.mark.parametrize("first", [
    b"", b"n,,", b"n=alice,r=abc", b"y,,n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc", b"n,,r=abc,n=alice",
    b"n,,n=alice", b"n,,n=alice,r=", b"n,,n=nobody,r=abc", b"n,a=bob,n=alice,r=abc", b"n,,n=al=41ice,r=abc",
    b"n,,n=alice,r=abc\xff", b"n,x=1,n=alice,r=abc",
])
def test_scram_malformed_or_unknown_client_first(users, first):
    auth = Authenticator("SCRAM-SHA-256", users)
    with pytest.raises(AuthenticationFailed):
        auth.step(first)
    assert not auth.done


def test_scram_user_without_that_mechanism(users):
    auth = Authenticator("SCRAM-SHA-256", users)
    with pytest.raises(AuthenticationFailed, match="Invalid user credentials"):
        auth.step(ScramClient("bob", "bob-pw", "SCRAM-SHA-256").first())


# -- the credentials file --------------------------------------------------------------------------------------------

def stored(password: str, mechanism: str, iterations: int = 4096) -> dict[str, object]:
    algo = ALGO[mechanism]
    salt = os.urandom(12)
    salted = hashlib.pbkdf2_hmac(algo, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    return {"salt": b64(salt), "iterations": iterations, "stored_key": b64(hashlib.new(algo, client_key).digest()),
            "server_key": b64(hmac.new(salted, b"Server Key", algo).digest())}


def test_load_users(tmp_path: Path):
    path = tmp_path / "users.yaml"
    path.write_text(yaml.safe_dump({"users": {"alice": {"password": "pw"},
                                              "bob": {"scram-sha-512": stored("bob-pw", "SCRAM-SHA-512")}}}))
    users = load_users(str(path))
    assert users.passwords == {"alice": "pw"}
    assert set(users.scram) == {("alice", "SCRAM-SHA-256"), ("alice", "SCRAM-SHA-512"), ("bob", "SCRAM-SHA-512")}
    auth = Authenticator("SCRAM-SHA-512", users)
    client = ScramClient("bob", "bob-pw", "SCRAM-SHA-512")
    assert auth.step(client.final(auth.step(client.first()))) == client.server_signature()


@pytest.mark.parametrize("text,needle", [
    ("users: [alice]\n", "expected 'users:'"),
    ("users: {alice: {password: ''}}\n", "non-empty"),
    ("users: {alice: {}}\n", "a user is a name"),
    ("users: {alice: {1: x}}\n", "unknown key 1"),
    ("users: {alice: {token: x}}\n", "unknown key 'token'"),
    ("users: {alice: {scram-sha-256: nope}}\n", "needs salt"),
    ("users: {alice: [unclosed\n", "cannot read"),
    ("\xff\xfe", "cannot read"),
])
def test_load_users_errors(tmp_path: Path, text: str, needle: str):
    path = tmp_path / "users.yaml"
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ConfigError, match="sasl.credentials.file") as err:
        load_users(str(path))
    assert needle in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("change,needle", [
    ({"iterations": 4095}, "iterations 4095 < 4096"),
    ({"salt": "%%%%"}, "base64"),
    ({"stored_key": b64(b"short")}, "32 bytes"),
    ({"server_key": None}, "needs salt"),
    ({"salt": ""}, "non-empty salt"),
])
def test_load_users_stored_key_errors(tmp_path: Path, change: dict[str, object], needle: str):
    entry = {**stored("pw", "SCRAM-SHA-256"), **change}
    path = tmp_path / "users.yaml"
    path.write_text(yaml.safe_dump({"users": {"bob": {"scram-sha-256": entry}}}))
    with pytest.raises(ConfigError, match="sasl.credentials.file") as err:
        load_users(str(path))
    assert needle in str(err.value), str(err.value)


def test_load_users_missing_file(tmp_path: Path):
    with pytest.raises(ConfigError, match="no such file"):
        load_users(str(tmp_path / "absent.yaml"))
