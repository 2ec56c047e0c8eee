"""Goal: TLS material for kafkasim's listeners (and ``guardian lab``'s brokers), as a small private PKI issues it.

Method: with the ``cryptography`` package, one self-signed CA (ECDSA P-256) signs a server
certificate whose subject alternative names are ``127.0.0.1`` and ``localhost`` (what clients
verify when they connect to kafkasim's bootstrap addresses) and a client certificate (CN
``guardian``) for mutual TLS; with ``server_also_client`` the server certificate serves as a client
certificate too (brokers and controllers authenticate each other with it).  :meth:`TlsMaterial.write`
puts them as PEM files in a directory (private keys mode 0600); :meth:`TlsMaterial.server_context`
builds the ``ssl.SSLContext`` a listener uses, optionally requiring a client certificate signed by the
same CA.

Guarantee: the files are what OpenSSL-based clients (librdkafka, kcat, Python's ``ssl``) load with
their usual options (``ssl.ca.location`` / ``ssl_cafile``, ``ssl.certificate.location`` +
``ssl.key.location``); hostname verification against 127.0.0.1 or localhost succeeds.

Cost: three EC key generations and signatures, a few milliseconds; certificates are valid for
ten years from generation.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALID_DAYS = 3650


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kafkasim"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the PEM files :meth:`TlsMaterial.write` wrote."""

    ca_file: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


class TlsMaterial:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate (all in memory)."""

    def __init__(self, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"), client_cn: str = "guardian",
                 server_also_client: bool = False) -> None:
        self.files: TlsFiles | None = None
        now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
        until = now + dt.timedelta(days=VALID_DAYS)
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = _name("kafkasim CA")
        ski = x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key())
        self.ca_cert = (
            x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
            .public_key(self.ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(self.ca_key, hashes.SHA256()))
        sans: list[x509.GeneralName] = []
        for h in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(h)))
            except ValueError:
                sans.append(x509.DNSName(h))
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if server_also_client else [])
        self.server_key, self.server_cert = self._leaf("localhost", sans, usages, now, until)
        self.client_key, self.client_cert = self._leaf(client_cn, [], [ExtendedKeyUsageOID.CLIENT_AUTH], now, until)

    def _leaf(self, cn: str, sans: list[x509.GeneralName], usages: list[x509.ObjectIdentifier], now: dt.datetime,
              until: dt.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self.ca_cert.subject)
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now).not_valid_after(until)
             .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
             .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
             .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()),
                            critical=False))
        if sans:
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return key, b.sign(self.ca_key, hashes.SHA256())

    def write(self, directory: Path) -> TlsFiles:
        """Write ``ca.pem``, ``server.pem``/``server-key.pem``, ``client.pem``/``client-key.pem``."""
        directory.mkdir(parents=True, exist_ok=True)
        files = TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem",
                         directory / "client.pem", directory / "client-key.pem")
        pem = serialization.Encoding.PEM
        _write(files.ca_file, self.ca_cert.public_bytes(pem), 0o644)
        _write(files.server_cert, self.server_cert.public_bytes(pem), 0o644)
        _write(files.server_key, _key_pem(self.server_key), 0o600)
        _write(files.client_cert, self.client_cert.public_bytes(pem), 0o644)
        _write(files.client_key, _key_pem(self.client_key), 0o600)
        self.files = files
        return files

    def _written(self) -> TlsFiles:
        if self.files is None:
            raise RuntimeError("TlsMaterial.write(directory) first: ssl contexts load the PEM files")
        return self.files

    def server_context(self, require_client_cert: bool = False) -> ssl.SSLContext:
        """A server-side context (the files must have been written); client certs verified against the CA."""
        files = self._written()
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(str(files.server_cert), str(files.server_key))
        if require_client_cert:
            ctx.load_verify_locations(cafile=str(files.ca_file))
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def client_context(self, with_client_cert: bool = False) -> ssl.SSLContext:
        """A client-side context trusting the CA (for tests and kafkasim's own probes)."""
        files = self._written()
        ctx = ssl.create_default_context(cafile=str(files.ca_file))
        if with_client_cert:
            ctx.load_cert_chain(str(files.client_cert), str(files.client_key))
        return ctx


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
