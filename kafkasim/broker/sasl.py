"""Goal: the server side of Kafka's SASL mechanisms PLAIN and SCRAM-SHA-256/512, over stored credentials.

Method: :class:`UserStore` keeps, per user, only salted derivations of the password — for SCRAM
the RFC 5802 ``StoredKey``/``ServerKey`` pair per hash (salt, 4096 iterations, as Kafka's
``kafka-configs --alter --add-config SCRAM-SHA-512=[...]`` stores them), for PLAIN a
PBKDF2-SHA-256 hash. :class:`SaslExchange` is one connection's exchange for one mechanism:
``step(client_bytes)`` returns the server's answer, raising :class:`AuthFailed` with the message
Kafka's broker uses when the credentials are wrong (the wire layer turns that into error 58,
SASL_AUTHENTICATION_FAILED). SCRAM follows RFC 5802/7677: client-first (``n,,n=user,r=nonce``),
server-first (``r=nonce+server nonce,s=salt,i=iterations``), client-final (``c=biws,r=...,p=proof``)
verified as ``H(proof XOR HMAC(StoredKey, AuthMessage)) == StoredKey``, server-final
``v=HMAC(ServerKey, AuthMessage)``. Unknown users get a deterministic fake salt and fail at the
last step, like a user with a wrong password (no user enumeration).

Guarantee: a client holding the right password completes the exchange (kafka-python, librdkafka);
any other input ends in :class:`AuthFailed` — never an exception of another type.

Cost: one PBKDF2 of 4096 iterations per user and mechanism when credentials are added; per
authentication a few HMACs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Callable
from dataclasses import dataclass

SCRAM_HASHES: dict[str, Callable[..., hashlib._Hash]] = {"SCRAM-SHA-256": hashlib.sha256,
                                                         "SCRAM-SHA-512": hashlib.sha512}
MECHANISMS = ("PLAIN", *SCRAM_HASHES)
ITERATIONS = 4096


class AuthFailed(Exception):
    """The client's credentials or messages were rejected (reported as SASL_AUTHENTICATION_FAILED)."""


@dataclass(frozen=True)
class ScramCredential:
    """What a broker stores for a SCRAM user: salt, iterations, StoredKey and ServerKey."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def scram_credential(mechanism: str, password: str, salt: bytes | None = None,
                     iterations: int = ITERATIONS) -> ScramCredential:
    """Derive the stored SCRAM credential of ``password`` (RFC 5802 section 3)."""
    h = SCRAM_HASHES[mechanism]
    salt = salt if salt is not None else os.urandom(16)
    salted = hashlib.pbkdf2_hmac(h().name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", h).digest()
    return ScramCredential(salt, iterations, h(client_key).digest(), hmac.new(salted, b"Server Key", h).digest())


class UserStore:
    """Users and their salted credentials for every mechanism."""

    def __init__(self) -> None:
        self.scram: dict[str, dict[str, ScramCredential]] = {m: {} for m in SCRAM_HASHES}
        self.plain: dict[str, tuple[bytes, bytes]] = {}
        self._fake_salt_key = os.urandom(16)

    def add(self, user: str, password: str) -> None:
        """Store ``user``'s credentials for PLAIN and both SCRAM hashes (the password is not kept)."""
        for mech in SCRAM_HASHES:
            self.scram[mech][user] = scram_credential(mech, password)
        salt = os.urandom(16)
        self.plain[user] = (salt, hashlib.pbkdf2_hmac("sha256", password.encode(), salt, ITERATIONS))

    def check_plain(self, user: str, password: str) -> bool:
        """True when ``password`` is ``user``'s (constant-time compare)."""
        got = self.plain.get(user)
        if got is None:
            return False
        return hmac.compare_digest(got[1], hashlib.pbkdf2_hmac("sha256", password.encode(), got[0], ITERATIONS))

    def fake_salt(self, user: str) -> bytes:
        """A salt for an unknown user, stable for the store's life."""
        return hmac.new(self._fake_salt_key, user.encode(), hashlib.sha256).digest()[:16]


def _attrs(msg: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthFailed("malformed SCRAM message")
        out.setdefault(part[0], part[2:])
    return out


def _saslname(s: str) -> str:
    if "=" in s.replace("=2C", "").replace("=3D", ""):
        raise AuthFailed("malformed SCRAM user name")
    return s.replace("=2C", ",").replace("=3D", "=")


class SaslExchange:
    """One client's authentication with ``mechanism``; ``principal`` is set on success."""

    def __init__(self, users: UserStore, mechanism: str) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unsupported SASL mechanism {mechanism!r}")
        self.users = users
        self.mechanism = mechanism
        self.principal: str | None = None
        self.done = False
        self._state = 0
        self._user = ""
        self._nonce = ""
        self._first_bare = ""
        self._server_first = ""
        self._gs2 = ""
        self._cred: ScramCredential | None = None

    def failure(self) -> str:
        """Kafka's message for rejected credentials of this mechanism."""
        if self.mechanism == "PLAIN":
            return "Authentication failed: Invalid username or password"
        return ("Authentication failed during authentication due to invalid credentials with SASL mechanism "
                + self.mechanism)

    def step(self, data: bytes) -> bytes:
        """Answer one client message; raises :class:`AuthFailed` when the exchange fails."""
        if self.done:
            raise AuthFailed("authentication already complete")
        try:
            if self.mechanism == "PLAIN":
                return self._plain(data)
            return self._scram(data.decode("utf-8"))
        except AuthFailed:
            self.done = True
            raise
        except (UnicodeDecodeError, ValueError) as e:
            self.done = True
            raise AuthFailed(f"malformed {self.mechanism} message") from e

    def _plain(self, data: bytes) -> bytes:
        parts = data.split(b"\0")
        if len(parts) != 3:
            raise AuthFailed("Invalid SASL/PLAIN response: expected 3 tokens")
        authz, user, password = (p.decode("utf-8") for p in parts)
        if not user or (authz and authz != user) or not self.users.check_plain(user, password):
            raise AuthFailed(self.failure())
        self.principal, self.done = user, True
        return b""

    def _scram(self, msg: str) -> bytes:
        h = SCRAM_HASHES[self.mechanism]
        if self._state == 0:
            if msg.startswith("p="):
                raise AuthFailed("channel binding is not supported")
            if not (msg.startswith("n,") or msg.startswith("y,")):
                raise AuthFailed("malformed SCRAM client-first message")
            cut = msg.index(",", 2) + 1
            self._gs2, self._first_bare = msg[:cut], msg[cut:]
            attrs = _attrs(self._first_bare)
            if "n" not in attrs or "r" not in attrs or not attrs["r"]:
                raise AuthFailed("malformed SCRAM client-first message")
            self._user = _saslname(attrs["n"])
            self._cred = self.users.scram[self.mechanism].get(self._user)
            salt = self._cred.salt if self._cred else self.users.fake_salt(self._user)
            iters = self._cred.iterations if self._cred else ITERATIONS
            self._nonce = attrs["r"] + base64.b64encode(os.urandom(18)).decode()
            self._server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iters}"
            self._state = 1
            return self._server_first.encode()
        if "," not in msg or ",p=" not in msg:
            raise AuthFailed("malformed SCRAM client-final message")
        without_proof, proof_b64 = msg.rsplit(",p=", 1)
        attrs = _attrs(without_proof)
        # Kafka's ScramSaslServer checks endsWith: librdkafka < 2.x-ish repeats the client nonce in front
        if not attrs.get("r", "").endswith(self._nonce):
            raise AuthFailed("Invalid client nonce in the final client message.")
        if base64.b64decode(attrs.get("c", "")) != self._gs2.encode():
            raise AuthFailed("SCRAM channel binding mismatch")
        proof = base64.b64decode(proof_b64, validate=True)
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        cred = self._cred
        if cred is None or len(proof) != len(cred.stored_key):
            raise AuthFailed(self.failure())
        signature = hmac.new(cred.stored_key, auth_message, h).digest()
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(h(client_key).digest(), cred.stored_key):
            raise AuthFailed(self.failure())
        self.principal, self.done = self._user, True
        server_sig = hmac.new(cred.server_key, auth_message, h).digest()
        return f"v={base64.b64encode(server_sig).decode()}".encode()
