"""The process's logging (:mod:`controlplane.logs`) and the shared redactor (:mod:`domain.redaction`)."""

from __future__ import annotations

import io
import json
import logging
import re
import ssl
from collections.abc import Iterator

import kafka.errors as kerrors
import pytest

from analytics_spark.clickhouse import ClickHouseUnavailable, connect
from controlplane.api.access import redact as access_redact
from controlplane.logs import Summariser, cluster_scope, setup_logging
from domain.redaction import mask_url, redact, register_secret
from kafkaio.security import SecuritySettings

ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = setup_logging("INFO", "text", stream=stream)
    try:
        yield stream
    finally:
        logging.getLogger().removeHandler(handler)


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_text_lines_carry_iso_time_level_logger_and_cluster(captured: io.StringIO) -> None:
    log = logging.getLogger("guardian.test")
    log.info("moved %d partitions", 3)
    with cluster_scope("c1"):
        log.warning("pass failed")
    log.debug("not shown at INFO")
    got = lines(captured)
    assert len(got) == 2
    assert re.fullmatch(ISO + r" INFO guardian\.test: moved 3 partitions", got[0]), got[0]
    assert re.fullmatch(ISO + r" WARNING guardian\.test \[c1\]: pass failed", got[1]), got[1]


def test_multi_line_messages_and_tracebacks_stay_on_one_line(captured: io.StringIO) -> None:
    log = logging.getLogger("guardian.test")
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        log.exception("job failed\nwith detail")
    got = lines(captured)
    assert len(got) == 1
    assert "job failed\\nwith detail" in got[0] and "Traceback" in got[0] and "RuntimeError: boom" in got[0]


def test_json_format_is_one_object_per_line() -> None:
    stream = io.StringIO()
    handler = setup_logging("INFO", "json", stream=stream)
    try:
        with cluster_scope("east"):
            logging.getLogger("guardian.executor").error("task %s refused", "t-0")
    finally:
        logging.getLogger().removeHandler(handler)
    (line,) = lines(stream)
    doc = json.loads(line)
    assert doc["level"] == "ERROR" and doc["logger"] == "guardian.executor" and doc["cluster"] == "east"
    assert doc["msg"] == "task t-0 refused" and re.fullmatch(ISO, doc["ts"])


def test_setup_replaces_only_its_own_handler() -> None:
    root = logging.getLogger()
    other = logging.NullHandler()
    root.addHandler(other)
    try:
        first = setup_logging("INFO", "text", stream=io.StringIO())
        second = setup_logging("WARNING", "json", stream=io.StringIO())
        assert first not in root.handlers and second in root.handlers and other in root.handlers
        assert root.level == logging.WARNING
        with pytest.raises(ValueError):
            setup_logging("LOUD")
    finally:
        root.removeHandler(other)
        root.removeHandler(second)


def test_secret_shapes_are_masked(captured: io.StringIO) -> None:
    log = logging.getLogger("guardian.test")
    log.warning("cannot open http://default:hunter2pw@ch.example:8123/db")
    log.warning("header Authorization: Bearer abc.def-ghi sent")
    log.warning("config sasl_plain_password=topsecret1, token: tok-99x")
    log.warning('{"password": "jsonsecret"}')
    text = captured.getvalue()
    for secret in ("hunter2pw", "abc.def-ghi", "topsecret1", "tok-99x", "jsonsecret"):
        assert secret not in text
    assert "http://default:***@ch.example:8123/db" in text


def test_registered_literals_are_masked_anywhere_even_in_exceptions(captured: io.StringIO) -> None:
    register_secret("Zq8-literal-secret-value\n")
    log = logging.getLogger("guardian.test")
    log.info("value %s in a sentence", "Zq8-literal-secret-value")
    try:
        raise ValueError("leaked Zq8-literal-secret-value here")
    except ValueError:
        log.exception("failed")
    assert "Zq8-literal" not in captured.getvalue()
    assert captured.getvalue().count("***") >= 2


def test_short_values_are_not_registered() -> None:
    register_secret("ab")
    register_secret(None)
    assert redact("ab cd") == "ab cd"


def test_the_api_access_log_uses_the_shared_redactor() -> None:
    register_secret("Access-Literal-42")
    assert access_redact("oops Access-Literal-42\nand postgres://u:pw0rd@h/x") == "oops *** and postgres://u:***@h/x"


def test_mask_url_keeps_user_and_host() -> None:
    assert mask_url("https://reader:p%40ss@ch:8443/?db=x") == "https://reader:***@ch:8443/?db=x"
    assert mask_url("http://ch:8123") == "http://ch:8123"


def test_a_sasl_password_read_from_a_file_is_registered(tmp_path, captured: io.StringIO) -> None:
    pw = tmp_path / "kafka.pw"
    pw.write_text("SaslFromFile-7731\n")
    settings = SecuritySettings.model_validate({"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                                "username": "guardian", "password_file": str(pw)})
    kwargs = settings.client_kwargs()
    logging.getLogger("kafka.conn").warning("auth failed with %r", dict(kwargs, raw=str.__str__(
        kwargs["sasl_plain_password"])))
    assert "SaslFromFile-7731" not in captured.getvalue()


def test_clickhouse_connect_errors_do_not_carry_the_url_password(captured: io.StringIO) -> None:
    with pytest.raises(ClickHouseUnavailable) as err:
        connect("http://default:ChPw-31337@127.0.0.1:1/", migrate=False)
    assert "ChPw-31337" not in str(err.value) and "default:***@127.0.0.1:1" in str(err.value)
    assert "ChPw-31337" not in captured.getvalue()


def test_kafka_python_errors_are_written_as_warnings(captured: io.StringIO) -> None:
    """Issue 38: kafka-python's retried failures (a dead broker's refused connections, a position it re-validates)
    filled the controller's log with ERROR lines; ERROR is kept for what an operator must act on."""
    logging.getLogger("kafka.consumer.fetcher").error("Fetch to node %s failed: %s", 1, "ECONNREFUSED")
    try:
        raise ConnectionResetError("reset by peer")
    except ConnectionResetError:
        logging.getLogger("kafka.net.transport").exception("Error receiving network data")
    logging.getLogger("kafka").error("bare library logger")
    logging.getLogger("kafka.conn").critical("still critical")
    logging.getLogger("kafkaio.admin").error("guardian's own kafka edge keeps its level")
    logging.getLogger("guardian.executor").error("plan refused")
    got = lines(captured)
    assert [line.split(" ", 2)[1:] for line in got] == [
        ["WARNING", "kafka.consumer.fetcher: Fetch to node 1 failed: ECONNREFUSED"],
        ["WARNING", got[1].split(" ", 2)[2]],
        ["WARNING", "kafka: bare library logger"],
        ["CRITICAL", "kafka.conn: still critical"],
        ["ERROR", "kafkaio.admin: guardian's own kafka edge keeps its level"],
        ["ERROR", "guardian.executor: plan refused"],
    ]
    assert "Error receiving network data" in got[1] and "ConnectionResetError: reset by peer" in got[1]


def test_kafka_python_errors_an_operator_must_fix_stay_errors(captured: io.StringIO) -> None:
    """No retry heals a refused login, a missing ACL, a mechanism the broker lacks or an untrusted certificate:
    those kafka-python lines stay ERROR (summarised like the rest); a refused connection is a WARNING."""
    manager = logging.getLogger("kafka.net.manager")
    manager.error("Connection failed: %s", kerrors.SaslAuthenticationFailedError("bad password for guardian"))
    manager.error("Connection failed: %s", kerrors.KafkaConnectionError("ECONNREFUSED"))
    logging.getLogger("kafka.cluster").error("Topic %s is not authorized for this client", "audit")
    logging.getLogger("kafka.net.connection").error("%s: SaslHandshake failed: %s", "<conn>",
                                                    "UnsupportedSaslMechanismError")
    logging.getLogger("kafka.coordinator").error("Attempt to join group %s failed due to fatal error: %s", "g",
                                                 "GroupAuthorizationFailedError")
    try:
        try:
            raise ssl.SSLCertVerificationError("certificate verify failed: self-signed certificate")
        except ssl.SSLError as exc:
            raise kerrors.KafkaConnectionError("handshake") from exc
    except kerrors.KafkaConnectionError:
        logging.getLogger("kafka.net.transport").exception("Error receiving network data")
    got = [line.split(" ", 2)[1:] for line in lines(captured)]
    assert [level for level, _ in got] == ["ERROR", "WARNING", "ERROR", "ERROR", "ERROR", "ERROR"], got


def test_kafka_python_pre_formatted_lines_are_one_kind_whatever_their_figures() -> None:
    """kafka-python's selector formats its slow-task warning before logging it (a loaded machine writes one per
    slow step): the figures and addresses do not make a new kind of line."""
    stream = io.StringIO()
    handler = setup_logging("INFO", stream=stream)
    try:
        selector = logging.getLogger("kafka.net.selector")
        for i in range(40):
            selector.warning(f"Task <Task coro=<_fetch at 0x7f{i:04x}> id={i}> ran for 0.{100 + i}s (>0.100s "
                             "threshold). It is blocking the event loop")
        assert sum("blocking the event loop" in line for line in stream.getvalue().splitlines()) == 1
    finally:
        logging.getLogger().removeHandler(handler)


def test_repeated_lines_are_summarised_per_key_and_window() -> None:
    clock = [0.0]
    summary = Summariser(window_s=60, clock=lambda: clock[0])
    assert summary.admit(("east", "auth")) == 0
    for _ in range(5):
        clock[0] += 1
        assert summary.admit(("east", "auth")) is None
    assert summary.admit(("west", "auth")) == 0  # another cluster is its own line
    clock[0] = 61
    assert summary.admit(("east", "auth")) == 5


def test_kafka_python_lines_are_summarised_once_a_minute() -> None:
    stream = io.StringIO()
    handler = setup_logging("INFO", stream=stream)
    try:
        noisy = logging.getLogger("kafka.net.manager")
        for _ in range(50):
            noisy.error("Connection to %s failed: %s", "node-1", "refused")
        logging.getLogger("guardian.test").error("ours %d", 1)
        logging.getLogger("guardian.test").error("ours %d", 1)
        lines = stream.getvalue().splitlines()
        assert sum("Connection to node-1 failed" in line for line in lines) == 1
        assert sum("ours 1" in line for line in lines) == 2  # our own lines are never summarised here
    finally:
        logging.getLogger().removeHandler(handler)
