"""How Guardian authenticates to a Kafka cluster: one typed settings record, secrets by reference only.

Goal: connect to secured clusters the way operators configure Kafka clients — ``security.protocol``
PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL, ``sasl.mechanism`` PLAIN | SCRAM-SHA-256 |
SCRAM-SHA-512, a CA file, a client certificate and key for mTLS — without a secret ever sitting in
a record that is logged, serialised, stored in the replicated state or returned by the API.

Method: :class:`SecuritySettings` (pydantic, frozen, unknown keys refused) holds the protocol, the
mechanism, the user name and file paths; a password (SASL, or the TLS key's) is only a reference —
``*_file`` (read, trailing newline stripped) or ``*_env`` (an environment variable's name).
:meth:`SecuritySettings.client_kwargs` resolves the references *at connect time* into kafka-python's
client keyword arguments (``security_protocol``, ``sasl_plain_password``, ``ssl_cafile``, ...); the
secret values it returns are :class:`Secret` strings whose ``repr``/``str``/``format`` print
``***`` (kafka-python logs its configuration dict at DEBUG). :func:`security_from_options` builds a
record from flat options named like Kafka's client properties (``--security-protocol``,
``--sasl-mechanism``, ``--sasl-username``, ``--sasl-password-file``, ``--ssl-cafile``, ...), for the CLI.

Guarantee: ``repr``, ``str``, ``model_dump``/``model_dump_json`` and every validation error of a
settings record contain no secret (there is none in it: validation errors hide their input, and a
literal ``password`` key is refused by name). A settings record is valid only when consistent
(SASL protocols need a mechanism, a user and exactly one password reference; TLS files only with
SSL protocols; a key password only with a key).
Cost: validation once at parse; one file read or environment lookup per secret per (re)connect.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from domain.redaction import register_secret


class SecurityError(ValueError):
    """Security settings are inconsistent, or a referenced secret cannot be read (never shows a secret)."""


class Secret(str):
    """A secret string that prints as ``***`` (``repr``, ``str``, ``format``); its bytes are unchanged."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'***'"

    def __str__(self) -> str:
        return "***"

    def __format__(self, spec: str) -> str:
        return "***"


class SecurityProtocol(StrEnum):
    """Kafka's ``security.protocol``."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        """True for SSL and SASL_SSL."""
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        """True for SASL_PLAINTEXT and SASL_SSL."""
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


class SaslMechanism(StrEnum):
    """Kafka's ``sasl.mechanism`` (the ones Guardian supports)."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


_LITERAL_SECRETS = ("password", "sasl_password", "sasl_plain_password", "key_password", "ssl_password",
                    "ssl_key_password")
_TLS_FIELDS = ("ca_file", "cert_file", "key_file", "key_password_file", "key_password_env")
_SASL_FIELDS = ("sasl_mechanism", "username", "password_file", "password_env")


class SecuritySettings(BaseModel):
    """One cluster's client security settings (secrets by ``*_file`` / ``*_env`` reference only)."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True, use_enum_values=False)

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism | None = None
    username: str | None = None
    password_file: str | None = None
    password_env: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password_file: str | None = None
    key_password_env: str | None = None
    ssl_check_hostname: bool = True

    @model_validator(mode="before")
    @classmethod
    def _no_literal_secret(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key in _LITERAL_SECRETS:
                if key in data:
                    hint = "key_password_file or key_password_env" if "key" in key or "ssl" in key else \
                        "password_file or password_env"
                    raise ValueError(f"{key!r} is not accepted: give the secret by reference ({hint})")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> SecuritySettings:
        p = self.protocol
        if p.uses_sasl:
            if self.sasl_mechanism is None:
                raise ValueError(f"protocol {p.value} needs sasl_mechanism "
                                 f"({', '.join(m.value for m in SaslMechanism)})")
            if not self.username:
                raise ValueError(f"protocol {p.value} needs username")
            if (self.password_file is None) == (self.password_env is None):
                raise ValueError(f"protocol {p.value} needs exactly one of password_file, password_env")
        else:
            extra = [f for f in _SASL_FIELDS if getattr(self, f) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)} set but protocol {p.value} does not use SASL")
        if not p.uses_tls:
            extra = [f for f in _TLS_FIELDS if getattr(self, f) is not None]
            if extra:
                raise ValueError(f"{', '.join(extra)} set but protocol {p.value} does not use TLS")
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("key_file needs cert_file")
        if (self.key_password_file is not None or self.key_password_env is not None) and self.key_file is None:
            raise ValueError("a key password needs key_file")
        if self.key_password_file is not None and self.key_password_env is not None:
            raise ValueError("give at most one of key_password_file, key_password_env")
        return self

    def describe(self) -> str:
        """``SASL_SSL/SCRAM-SHA-512 as user 'guardian'`` — for messages (no secret, no path)."""
        out = self.protocol.value
        if self.sasl_mechanism is not None:
            out += f"/{self.sasl_mechanism.value} as user {self.username!r}"
        if self.cert_file is not None:
            out += " with a client certificate"
        return out

    def client_kwargs(self) -> dict[str, Any]:
        """kafka-python client keyword arguments, secrets resolved now (:class:`SecurityError` if unreadable).

        Call at connect time, pass straight to the client, do not keep: the values of
        ``sasl_plain_password`` / ``ssl_password`` are the secrets (as :class:`Secret` strings).
        """
        out: dict[str, Any] = {"security_protocol": self.protocol.value}
        if self.protocol.uses_tls:
            for f in ("ca_file", "cert_file", "key_file"):
                path = getattr(self, f)
                if path is not None and not Path(path).is_file():
                    raise SecurityError(f"{f} {path!r} is not a readable file")
            out["ssl_check_hostname"] = self.ssl_check_hostname
            out["ssl_cafile"] = self.ca_file
            out["ssl_certfile"] = self.cert_file
            out["ssl_keyfile"] = self.key_file
            key_pw = _resolve("key_password", self.key_password_file, self.key_password_env)
            if key_pw is not None:
                out["ssl_password"] = key_pw
        if self.protocol.uses_sasl:
            assert self.sasl_mechanism is not None  # validated
            out["sasl_mechanism"] = self.sasl_mechanism.value
            out["sasl_plain_username"] = self.username
            out["sasl_plain_password"] = _resolve("password", self.password_file, self.password_env)
        return out


PLAINTEXT = SecuritySettings()
"""No TLS, no SASL (the default)."""


def _resolve(what: str, file: str | None, env: str | None) -> Secret | None:
    """The secret behind a ``*_file`` or ``*_env`` reference (None when neither is set)."""
    if file is not None:
        try:
            text = Path(file).read_text(encoding="utf-8")
        except OSError as exc:
            raise SecurityError(f"{what}_file {file!r} cannot be read: {exc.strerror or type(exc).__name__}") from None
        register_secret(text.rstrip("\r\n"))  # masked in every log line from now on
        return Secret(text.rstrip("\r\n"))
    if env is not None:
        value = os.environ.get(env)
        if value is None:
            raise SecurityError(f"{what}_env: environment variable {env!r} is not set")
        register_secret(value)
        return Secret(value)
    return None


def parse_security(doc: Any, at: str = "$.security") -> SecuritySettings:
    """A :class:`SecuritySettings` from a JSON object; :class:`SecurityError` naming the JSON path."""
    if doc is None:
        return PLAINTEXT
    if not isinstance(doc, Mapping):
        raise SecurityError(f"{at}: expected an object")
    try:
        return SecuritySettings.model_validate(dict(doc))
    except ValidationError as exc:
        raise SecurityError(_errors_at(exc, at)) from None


def _errors_at(exc: ValidationError, at: str) -> str:
    """``$.path.field: message`` of every error (pydantic's messages, never its input values)."""
    parts = []
    for err in exc.errors(include_input=False, include_url=False):
        loc = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in err.get("loc", ()))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(f"{at}{loc}: {msg}")
    return "; ".join(parts)


SECURITY_OPTIONS: dict[str, str] = {
    "--security-protocol": "protocol",
    "--sasl-mechanism": "sasl_mechanism",
    "--sasl-username": "username",
    "--sasl-password-file": "password_file",
    "--sasl-password-env": "password_env",
    "--ssl-cafile": "ca_file",
    "--ssl-certfile": "cert_file",
    "--ssl-keyfile": "key_file",
    "--ssl-key-password-file": "key_password_file",
    "--ssl-key-password-env": "key_password_env",
    "--ssl-check-hostname/--no-ssl-check-hostname": "ssl_check_hostname",
}
"""CLI flag (named like Kafka's client properties) -> :class:`SecuritySettings` field."""


def security_from_options(security_protocol: str | None = None, sasl_mechanism: str | None = None,
                          sasl_username: str | None = None, sasl_password_file: str | None = None,
                          sasl_password_env: str | None = None, ssl_cafile: str | None = None,
                          ssl_certfile: str | None = None, ssl_keyfile: str | None = None,
                          ssl_key_password_file: str | None = None, ssl_key_password_env: str | None = None,
                          ssl_check_hostname: bool = True) -> SecuritySettings:
    """Settings from flat CLI options (see :data:`SECURITY_OPTIONS`); :class:`SecurityError` naming the flag.

    ``security_protocol`` defaults to PLAINTEXT, as in Kafka's clients: a SASL or TLS option without
    a matching protocol is an error, not a silent upgrade.
    """
    values: dict[str, Any] = {
        "protocol": (security_protocol or "PLAINTEXT").upper(), "sasl_mechanism": sasl_mechanism,
        "username": sasl_username, "password_file": sasl_password_file, "password_env": sasl_password_env,
        "ca_file": ssl_cafile, "cert_file": ssl_certfile, "key_file": ssl_keyfile,
        "key_password_file": ssl_key_password_file, "key_password_env": ssl_key_password_env,
        "ssl_check_hostname": ssl_check_hostname}
    if values["sasl_mechanism"] is not None:
        values["sasl_mechanism"] = str(values["sasl_mechanism"]).upper()
    try:
        return SecuritySettings.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        flag = {v: k.split("/")[0] for k, v in SECURITY_OPTIONS.items()}
        fields = re.compile(r"\b(" + "|".join(sorted(flag, key=len, reverse=True)) + r")\b")
        parts = []
        for err in exc.errors(include_input=False, include_url=False):
            loc = err.get("loc", ())
            name = flag.get(str(loc[0]), "") if loc else ""
            msg = fields.sub(lambda m: flag[m.group(1)], str(err.get("msg", "invalid")).removeprefix("Value error, "))
            parts.append(f"{name}: {msg}" if name else msg)
        raise SecurityError("; ".join(parts)) from None
