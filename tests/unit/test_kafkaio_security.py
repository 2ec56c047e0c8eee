"""Client security settings: kafka-python kwargs resolved at connect time, validation, and no secret anywhere."""

from __future__ import annotations

import re
import ssl
from pathlib import Path

import kafka.errors as kerrors
import pytest
from pydantic import ValidationError

from kafkaio.connection import KafkaConnection
from kafkaio.endpoints import parse_endpoints
from kafkaio.errors import AdminError, KafkaAuthError, KafkaSourceError
from kafkaio.security import (
    PLAINTEXT,
    SECURITY_OPTIONS,
    Secret,
    SecurityError,
    SecuritySettings,
    parse_security,
    security_from_options,
)

SECRET = "s3cr3t-correct-horse"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    out = {}
    for name, text in (("pw", SECRET + "\n"), ("keypw", "key-" + SECRET), ("ca", "CA"), ("cert", "C"), ("key", "K")):
        p = tmp_path / name
        p.write_text(text)
        out[name] = str(p)
    return out


def test_plaintext_is_the_default_and_needs_nothing() -> None:
    assert PLAINTEXT.client_kwargs() == {"security_protocol": "PLAINTEXT"}
    assert parse_security(None) is PLAINTEXT and SecuritySettings() == PLAINTEXT


def test_sasl_ssl_scram_kwargs_read_the_secret_at_connect_time(files: dict[str, str], tmp_path: Path) -> None:
    s = SecuritySettings(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username="guardian",
                         password_file=files["pw"], ca_file=files["ca"], ssl_check_hostname=False)
    kw = s.client_kwargs()
    assert kw == {"security_protocol": "SASL_SSL", "ssl_check_hostname": False, "ssl_cafile": files["ca"],
                  "ssl_certfile": None, "ssl_keyfile": None, "sasl_mechanism": "SCRAM-SHA-512",
                  "sasl_plain_username": "guardian", "sasl_plain_password": SECRET}  # trailing newline stripped
    assert isinstance(kw["sasl_plain_password"], Secret)
    Path(files["pw"]).write_text("rotated")  # read again on every (re)connect
    assert s.client_kwargs()["sasl_plain_password"] == "rotated"


def test_mtls_with_a_key_password_from_the_environment(files: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GUARDIAN_KEY_PW", SECRET)
    s = SecuritySettings(protocol="SSL", ca_file=files["ca"], cert_file=files["cert"], key_file=files["key"],
                         key_password_env="GUARDIAN_KEY_PW")
    kw = s.client_kwargs()
    assert (kw["ssl_certfile"], kw["ssl_keyfile"], kw["ssl_password"]) == (files["cert"], files["key"], SECRET)
    assert "sasl_mechanism" not in kw and kw["ssl_check_hostname"] is True


def test_unreadable_secrets_name_the_reference_not_a_value(files: dict[str, str], tmp_path: Path) -> None:
    s = SecuritySettings(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="u", password_env="NOPE_X1")
    with pytest.raises(SecurityError, match="environment variable 'NOPE_X1' is not set"):
        s.client_kwargs()
    s = SecuritySettings(protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN", username="u",
                         password_file=str(tmp_path / "gone"))
    with pytest.raises(SecurityError, match=r"password_file .*gone.* cannot be read"):
        s.client_kwargs()
    s = SecuritySettings(protocol="SSL", ca_file=str(tmp_path / "no-ca.pem"))
    with pytest.raises(SecurityError, match=r"ca_file .* is not a readable file"):
        s.client_kwargs()


@pytest.mark.parametrize(("settings", "error"), [
    ({"protocol": "SASL_SSL", "username": "u", "password_file": "/p"}, "needs sasl_mechanism"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "password_file": "/p"}, "needs username"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "username": "u"}, "exactly one of password_file"),
    ({"protocol": "SSL", "username": "u"}, "username set but protocol SSL does not use SASL"),
    ({"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "username": "u", "password_env": "P",
      "ca_file": "/ca"}, "ca_file set but protocol SASL_PLAINTEXT does not use TLS"),
    ({"protocol": "SSL", "key_file": "/k"}, "key_file needs cert_file"),
    ({"protocol": "SSL", "cert_file": "/c", "key_password_file": "/p"}, "a key password needs key_file"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "username": "u", "password_file": "/p"}, "sasl_mechanism"),
    ({"protocol": "PLAINTEXT", "password": SECRET}, "'password' is not accepted"),
    ({"protocol": "SSL", "ssl_password": SECRET}, "'ssl_password' is not accepted"),
])
def test_inconsistent_settings_are_refused_without_echoing_input(settings: dict[str, str], error: str) -> None:
    with pytest.raises(ValidationError) as exc:
        SecuritySettings.model_validate(settings)
    assert error in str(exc.value) and SECRET not in str(exc.value) and "input_value" not in str(exc.value)
    with pytest.raises(SecurityError) as exc2:
        parse_security(settings, "$.s")
    assert error in str(exc2.value) and SECRET not in str(exc2.value)


def test_no_secret_in_repr_str_or_serialisation(files: dict[str, str]) -> None:
    s = SecuritySettings(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256", username="guardian",
                         password_file=files["pw"], ca_file=files["ca"], cert_file=files["cert"],
                         key_file=files["key"], key_password_file=files["keypw"])
    kw = s.client_kwargs()
    assert kw["sasl_plain_password"] == SECRET and kw["ssl_password"] == "key-" + SECRET
    doc = {"clusters": {"c": {"bootstrap_servers": "h:1", "security": s.model_dump(mode="json")}}}
    eps = parse_endpoints(doc, "c")
    conn = KafkaConnection.for_endpoints(eps)
    texts = [repr(s), str(s), s.model_dump_json(), str(s.model_dump()), s.describe(), repr(eps), str(eps),
             repr(conn), repr(kw), str(kw), "%s" % (kw,), f"{kw['sasl_plain_password']}",  # noqa: UP031 - as logging does
             str(kw["sasl_plain_password"]), repr(kw["ssl_password"])]
    for text in texts:
        assert SECRET not in text, text
    assert s.describe() == "SASL_SSL/SCRAM-SHA-256 as user 'guardian' with a client certificate"
    assert eps.security == s  # round-trips through its own serialisation


def test_flat_options_named_like_kafka_properties(files: dict[str, str]) -> None:
    s = security_from_options(security_protocol="sasl_ssl", sasl_mechanism="scram-sha-512", sasl_username="g",
                              sasl_password_file=files["pw"], ssl_cafile=files["ca"], ssl_check_hostname=False)
    assert s == SecuritySettings(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username="g",
                                 password_file=files["pw"], ca_file=files["ca"], ssl_check_hostname=False)
    assert security_from_options() == PLAINTEXT
    with pytest.raises(SecurityError) as exc:
        security_from_options(sasl_mechanism="PLAIN", sasl_username="g", sasl_password_env="X")
    assert ("--sasl-mechanism, --sasl-username, --sasl-password-env set but --security-protocol PLAINTEXT"
            in str(exc.value))
    with pytest.raises(SecurityError, match="--security-protocol: Input should be"):
        security_from_options(security_protocol="TLS")
    assert set(SECURITY_OPTIONS.values()) == set(SecuritySettings.model_fields)


def test_a_refused_login_is_a_kafka_auth_error_naming_cluster_and_mechanism() -> None:
    s = SecuritySettings(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512", username="guardian",
                         password_env="UNSET_GUARDIAN_PW_X")
    conn = KafkaConnection("127.0.0.1:1", cluster="east", security=s)
    with pytest.raises(KafkaAuthError) as exc:  # the secret cannot be read: no network at all
        conn.client()
    assert "cluster east" in str(exc.value) and "SCRAM-SHA-512 as user 'guardian'" in str(exc.value)
    assert isinstance(exc.value, AdminError) and isinstance(exc.value, KafkaSourceError)
    refused = kerrors.SaslAuthenticationFailedError("SaslAuthenticationFailedError: invalid credentials")
    err = conn.auth_error(refused)
    assert str(err) == ("cluster east: authentication failed with SASL_SSL/SCRAM-SHA-512 as user 'guardian': "
                        "invalid credentials")
    try:  # kafka-python wraps a failed TLS handshake; the verification error is its context
        try:
            raise ssl.SSLCertVerificationError(1, "certificate verify failed")
        except ssl.SSLError as inner:
            raise kerrors.KafkaConnectionError(f"Handshake failed: {inner}")  # noqa: B904 - as kafka-python does
    except kerrors.KafkaConnectionError as wrapped:
        tls = conn.auth_error(wrapped)
    assert str(tls) == ("cluster east: TLS handshake failed with SASL_SSL/SCRAM-SHA-512 as user 'guardian': "
                        "certificate verify failed")
    assert conn.auth_error(kerrors.KafkaConnectionError("Connection reset")) is None
    assert conn.auth_error(ssl.SSLEOFError("EOF")) is None  # a dropped handshake is not a refusal


def test_one_module_constructs_the_admin_client() -> None:
    """The whole product (not tests, not the simulator) constructs ``KafkaAdminClient`` in one place."""
    sites = []
    for pkg in ("domain", "kafkaio", "controlplane", "raft", "planners", "collectors", "analytics_spark"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if re.search(r"KafkaAdminClient\(", path.read_text()):
                sites.append(str(path.relative_to(ROOT)))
    assert sites == ["kafkaio/connection.py"]
