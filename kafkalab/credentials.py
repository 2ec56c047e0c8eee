"""Goal: the lab's private PKI and credentials, as a production deployment is set up before its brokers start.

Method: one CA (:class:`kafkasim.broker.tls.TlsMaterial`, ECDSA P-256) signs a certificate for 127.0.0.1/localhost
usable as server and client (brokers and controllers authenticate each other with it over mutual TLS).
Written into the lab's ``tls/`` directory:

* ``ca.pem`` — what every client trusts (``ssl_cafile``, ``ssl.ca.location``);
* ``node-keystore.pem`` — PKCS#8 key + certificate + CA, Kafka's ``ssl.keystore.type=PEM`` keystore;
* ``server.pem`` / ``server-key.pem`` — node_exporter's ``tls_server_config``;
* ``exporter.p12`` — the JMX exporter agent's PKCS#12 keystore (its password in ``exporter.p12.password``).

Credentials: random passwords (``secrets.token_urlsafe``) for the Kafka SCRAM users ``guardian`` (what
Guardian and the tests log in as) and ``admin``, and for the metrics user ``prometheus`` (basic auth on
both exporters). The exporters are given only hashes: PBKDF2-HMAC-SHA256 for the JMX exporter, bcrypt for
node_exporter.

Guarantee: every secret is a file of mode 0600 (private keys too); nothing here logs or returns a
password except to the caller that writes a broker's configuration.
Cost: two EC keys and signatures, one bcrypt and one PBKDF2 hash: well under a second.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12

from kafkasim.broker.tls import TlsMaterial

KAFKA_USER = "guardian"
ADMIN_USER = "admin"
METRICS_USER = "prometheus"
MECHANISM = "SCRAM-SHA-512"
PBKDF2_ITERATIONS = 210_000
PBKDF2_KEY_BYTES = 128


def write_secret(path: Path, value: str | bytes) -> None:
    """Write ``value`` to ``path`` with mode 0600 (created so, never readable by others in between)."""
    data = value.encode() if isinstance(value, str) else value
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)


def read_secret(path: Path) -> str:
    return path.read_text().strip()


@dataclass(frozen=True)
class LabSecrets:
    """Where the lab's TLS files and passwords are (the passwords themselves stay in their files)."""

    directory: Path

    @property
    def ca_file(self) -> Path:
        return self.directory / "tls" / "ca.pem"

    @property
    def keystore(self) -> Path:
        return self.directory / "tls" / "node-keystore.pem"

    @property
    def server_cert(self) -> Path:
        return self.directory / "tls" / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "tls" / "server-key.pem"

    @property
    def exporter_p12(self) -> Path:
        return self.directory / "tls" / "exporter.p12"

    def password_file(self, user: str) -> Path:
        return self.directory / f"{user}.password"

    def password(self, user: str) -> str:
        return read_secret(self.password_file(user))


def generate(directory: Path) -> LabSecrets:
    """Create the CA, the node certificate and keystores, and one password per user, under ``directory``."""
    out = LabSecrets(directory)
    tls_dir = directory / "tls"
    tls = TlsMaterial(server_also_client=True)
    tls.write(tls_dir)  # ca.pem, server.pem, server-key.pem (+ a client pair the lab does not use)
    pem = serialization.Encoding.PEM
    key = tls.server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    chain = tls.server_cert.public_bytes(pem) + tls.ca_cert.public_bytes(pem)
    write_secret(out.keystore, key + chain)
    p12_password = secrets.token_urlsafe(18)
    write_secret(tls_dir / "exporter.p12.password", p12_password)
    write_secret(out.exporter_p12, pkcs12.serialize_key_and_certificates(
        b"exporter", tls.server_key, tls.server_cert, [tls.ca_cert],
        serialization.BestAvailableEncryption(p12_password.encode())))
    for user in (KAFKA_USER, ADMIN_USER, METRICS_USER):
        write_secret(out.password_file(user), secrets.token_urlsafe(24) + "\n")
    return out


def pbkdf2_hash(password: str, salt: str) -> str:
    """The JMX exporter's ``PBKDF2WithHmacSHA256`` hash (its ``keyLength`` is in bytes) as lower-case hex."""
    return hashlib.pbkdf2_hmac("sha256", password.encode(), salt.encode(), PBKDF2_ITERATIONS, PBKDF2_KEY_BYTES).hex()


def bcrypt_hash(password: str) -> str:
    """node_exporter's ``basic_auth_users`` hash."""
    import bcrypt  # the lab's extra; imported where needed so the CLI starts without it

    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=10)).decode()
