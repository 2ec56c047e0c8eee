"""Goal: Kafka listener security — PLAINTEXT, SSL (optionally mutual), SASL_PLAINTEXT and SASL_SSL.

Method: :class:`SecurityConfig` says what every broker listener of a :class:`~kafkasim.broker.server.SimServer`
speaks: TLS comes from a :class:`~kafkasim.broker.tls.TlsMaterial` context handed to ``asyncio.start_server``
(the handshake is asyncio's, so any TLS client works); SASL is a per-connection :class:`SaslGate`
that plays the broker's part of KIP-43/KIP-152: before authentication only ApiVersions (answered
normally, advertising SaslHandshake=17 and SaslAuthenticate=36), SaslHandshake (v0 and v1) and
SaslAuthenticate (v0-2) are accepted; any other request closes the connection, as a broker does.
SaslHandshake answers the enabled mechanisms (UNSUPPORTED_SASL_MECHANISM for others); each
SaslAuthenticate drives a :class:`~kafkasim.broker.sasl.SaslExchange`; rejected credentials are answered
with error 58 SASL_AUTHENTICATION_FAILED and the broker's message, then the connection is closed.
A v0 handshake is followed by raw length-prefixed SASL tokens (pre-KIP-152 clients).

Guarantee: a client with a wrong password gets an authentication error on its first attempt (no
timeout); an unauthenticated connection never reaches the Kafka request handlers.

Cost: O(1) per request once authenticated (one attribute check).
"""

from __future__ import annotations

import ssl
import struct
from dataclasses import dataclass, field
from typing import Any

from kafkasim.broker.sasl import MECHANISMS, AuthFailed, SaslExchange, UserStore
from kafkasim.broker.tls import TlsMaterial
from kafkasim.broker.wire import REGISTRY, decode_request, encode_response, peek_header

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
ILLEGAL_SASL_STATE = 34
UNSUPPORTED_SASL_MECHANISM = 33
SASL_AUTHENTICATION_FAILED = 58


@dataclass
class SecurityConfig:
    """What the Kafka listeners speak; ``users`` holds the SASL credentials."""

    protocol: str = "PLAINTEXT"
    mechanisms: tuple[str, ...] = MECHANISMS
    users: UserStore = field(default_factory=UserStore)
    tls: TlsMaterial | None = None
    require_client_cert: bool = False

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"security protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        bad = [m for m in self.mechanisms if m not in MECHANISMS]
        if bad or not self.mechanisms:
            raise ValueError(f"SASL mechanisms must be among {MECHANISMS}, got {list(self.mechanisms)}")
        if self.uses_tls and self.tls is None:
            raise ValueError(f"{self.protocol} needs TLS material")

    @property
    def uses_sasl(self) -> bool:
        """True for SASL_PLAINTEXT and SASL_SSL."""
        return self.protocol.startswith("SASL_")

    @property
    def uses_tls(self) -> bool:
        """True for SSL and SASL_SSL."""
        return self.protocol in ("SSL", "SASL_SSL")

    def server_context(self) -> ssl.SSLContext | None:
        """The listeners' TLS context (None without TLS)."""
        if not self.uses_tls or self.tls is None:
            return None
        return self.tls.server_context(self.require_client_cert)


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class SaslGate:
    """One connection's SASL state: answers the SASL APIs until the client is authenticated."""

    def __init__(self, cfg: SecurityConfig) -> None:
        self.cfg = cfg
        self.exchange: SaslExchange | None = None
        self.raw_tokens = False  # after a v0 handshake: unframed SASL tokens follow
        self.principal: str | None = None

    @property
    def authenticated(self) -> bool:
        """True once an exchange succeeded."""
        return self.principal is not None

    def answer(self, frame: bytes) -> tuple[bytes | None, bool]:
        """(bytes to send or None, close the connection afterwards) for a frame that is SASL's.

        Raw v0 tokens and SaslHandshake/SaslAuthenticate requests are answered here; the caller
        passes ApiVersions to the normal handler and closes on anything else before authentication.
        """
        if self.raw_tokens:
            return self._raw(frame)
        key, ver, cid = peek_header(frame)
        try:
            _, req = decode_request(frame)
        except Exception:
            return None, True
        if key == 17:
            return self._handshake(ver, cid, req)
        return self._authenticate(ver, cid, req)

    def _handshake(self, ver: int, cid: int, req: Any) -> tuple[bytes | None, bool]:
        R = REGISTRY[17]["response"]
        enabled = list(self.cfg.mechanisms)
        if self.authenticated or self.exchange is not None:
            return encode_response(R(version=ver, error_code=ILLEGAL_SASL_STATE, mechanisms=enabled), ver, cid), True
        if req.mechanism not in enabled:
            resp = R(version=ver, error_code=UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)
            return encode_response(resp, ver, cid), True
        self.exchange = SaslExchange(self.cfg.users, req.mechanism)
        self.raw_tokens = ver == 0
        return encode_response(R(version=ver, error_code=0, mechanisms=enabled), ver, cid), False

    def _authenticate(self, ver: int, cid: int, req: Any) -> tuple[bytes | None, bool]:
        R = REGISTRY[36]["response"]
        ex = self.exchange
        if ex is None or self.authenticated or self.raw_tokens:
            resp = R(version=ver, error_code=ILLEGAL_SASL_STATE, error_message="Unexpected SaslAuthenticate request",
                     auth_bytes=b"", session_lifetime_ms=0)
            return encode_response(resp, ver, cid), True
        try:
            out = ex.step(bytes(req.auth_bytes or b""))
        except AuthFailed as e:
            resp = R(version=ver, error_code=SASL_AUTHENTICATION_FAILED, error_message=str(e), auth_bytes=b"",
                     session_lifetime_ms=0)
            return encode_response(resp, ver, cid), True
        if ex.done:
            self.principal = ex.principal
        resp = R(version=ver, error_code=0, error_message=None, auth_bytes=out, session_lifetime_ms=0)
        return encode_response(resp, ver, cid), False

    def _raw(self, token: bytes) -> tuple[bytes | None, bool]:
        ex = self.exchange
        if ex is None:
            return None, True
        try:
            out = ex.step(token)
        except AuthFailed:
            return None, True  # v0 has no way to say why: the broker closes the connection
        if ex.done:
            self.principal = ex.principal
            self.raw_tokens = False
        return _framed(out), False
