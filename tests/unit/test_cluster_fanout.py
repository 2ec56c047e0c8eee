"""Per-cluster isolation of a loop's work: a hanging cluster never delays another, never has two tasks in
flight, is reported as its own ``timeout`` and regains good standing once it answers in time."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from controlplane.service.cluster_status import ERROR_KINDS, ClusterStatus, error_kind, metrics_error
from controlplane.service.fanout import ClusterFanout
from kafkaio.errors import KafkaAuthError


def test_a_hanging_cluster_delays_the_pass_once_by_its_deadline_then_never() -> None:
    status = ClusterStatus()
    fan = ClusterFanout("collect", status, deadline_s=0.3, workers=4)
    release = threading.Event()
    calls = {"hung": 0, "ok": 0}

    def hung() -> str:
        calls["hung"] += 1
        release.wait(10)
        return "late"

    def ok() -> str:
        calls["ok"] += 1
        return "fine"

    t0 = time.monotonic()
    first = fan.run({"hung": hung, "a": ok, "b": ok})
    first_s = time.monotonic() - t0
    assert first == {"a": "fine", "b": "fine"}
    assert 0.3 <= first_s < 1.0  # waited for the new hang up to its deadline, no longer
    assert fan.suspects() == {"hung"}
    assert (status.last_error("hung") or {}).get("kind") == "timeout"
    assert status.report("hung")["loops"]["collect"]["overdue"] is True
    for _ in range(3):  # the suspect is not waited for, and its task still in flight is not started again
        t0 = time.monotonic()
        assert fan.run({"hung": hung, "a": ok, "b": ok}) == {"a": "fine", "b": "fine"}
        assert time.monotonic() - t0 < 0.2
    assert calls["hung"] == 1
    assert status.last_error("a") is None
    release.set()
    assert fan.wait_idle(5)
    assert fan.suspects() == {"hung"}  # it ended late: still suspect until a task ends in time
    assert fan.run({"hung": ok}) == {}  # a suspect is not waited for ...
    assert fan.wait_idle(5)
    assert fan.suspects() == set()  # ... but once it answered in time it is in good standing
    assert status.last_error("hung") is None
    assert status.error_counts(["hung"])["hung"]["timeout"] == 1


def test_errors_are_counted_by_kind_and_named_per_cluster() -> None:
    status = ClusterStatus()
    fan = ClusterFanout("executor", status, deadline_s=5, workers=2)

    def refused() -> None:
        raise KafkaAuthError("cluster east: SASL_SSL/SCRAM-SHA-512 as user 'guardian' refused", "east", "x")

    def closed() -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    assert fan.run({"east": refused, "west": closed, "ok": lambda: 1}) == {"ok": 1}
    assert fan.suspects() == {"east", "west"}  # failing clusters are not waited for until they succeed
    counts = status.error_counts(["east", "west", "ok", "never"])
    assert counts["east"]["auth"] == 1 and counts["west"]["unreachable"] == 1
    assert counts["ok"] == dict.fromkeys(ERROR_KINDS, 0) == counts["never"]
    east = status.last_error("east") or {}
    assert "refused" in east["message"] and east["loop"] == "executor"


def test_a_refused_login_is_an_error_and_what_heals_by_itself_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 38: ERROR is for what an operator must act on. The loop retries both every pass, but only new
    credentials end a refused login; a refused connection ends when the broker is back. One line per cluster and
    kind per minute, whatever the passes."""
    fan = ClusterFanout("collect", ClusterStatus(), deadline_s=5, workers=2)

    def refused() -> None:
        raise KafkaAuthError("cluster levels-east: SASL_SSL/SCRAM-SHA-512 as user 'guardian' refused", "east", "x")

    def closed() -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    with caplog.at_level(logging.WARNING, logger="controlplane.service.fanout"):
        for _ in range(3):
            fan.run({"levels-east": refused, "levels-west": closed})
            assert fan.wait_idle(5)
    got = sorted((r.levelname, r.getMessage().split(" failed")[0]) for r in caplog.records)
    assert got == [("ERROR", "collect of levels-east"), ("WARNING", "collect of levels-west")]


def test_concurrency_is_bounded_and_suspects_never_take_a_healthy_slot() -> None:
    status = ClusterStatus()
    fan = ClusterFanout("throttle", status, deadline_s=0.2, workers=2, suspect_workers=1, patience_s=0.2)
    running, peak = [0], [0]
    lock = threading.Lock()

    def work() -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    fan.run({f"c{i}": work for i in range(8)})
    assert peak[0] == 2
    stuck = threading.Event()
    fan.run({"s1": lambda: stuck.wait(5), "s2": lambda: stuck.wait(5)})  # both overdue: suspects
    assert fan.suspects() == {"s1", "s2"}
    t0 = time.monotonic()
    assert fan.run({f"c{i}": work for i in range(4)}) == {f"c{i}": None for i in range(4)}
    assert time.monotonic() - t0 < 0.5
    stuck.set()
    assert fan.wait_idle(5)


def test_error_kinds_and_metrics_failures() -> None:
    assert error_kind(TimeoutError("timed out")) == "timeout"
    assert error_kind(RuntimeError("cluster c: no brokers reachable")) == "unreachable"
    try:
        try:
            raise ConnectionRefusedError(111, "refused")
        except OSError as exc:
            raise RuntimeError("metadata read failed") from exc
    except RuntimeError as wrapped:
        assert error_kind(wrapped) == "unreachable"
    assert error_kind(ValueError("bad")) == "error"
    assert metrics_error({}) is None
    refused = metrics_error({"https://b1:7071/metrics": "HTTP 401: 'Unauthorized'",
                             "https://b2:9100/metrics": "timed out"})
    assert refused is not None and refused[0] == "metrics_auth" and "b1:7071" in refused[1]
    assert (metrics_error({"https://b2:9100/metrics": "timed out"}) or ("",))[0] == "metrics"


def test_a_slow_but_successful_cluster_is_not_waited_for_until_it_is_quick_again() -> None:
    status = ClusterStatus()
    fan = ClusterFanout("collect", status, deadline_s=2.0, patience_s=0.1)
    delay = [0.3]

    def slow_exporters() -> str:
        time.sleep(delay[0])
        return "round"

    assert fan.run({"slow": slow_exporters}) == {"slow": "round"}  # first time: waited (within the deadline)
    assert fan.suspects() == {"slow"} and status.last_error("slow") is None  # slow is not an error
    t0 = time.monotonic()
    assert fan.run({"slow": slow_exporters, "quick": lambda: 1}) == {"quick": 1}
    assert time.monotonic() - t0 < 0.2
    assert fan.wait_idle(5)
    delay[0] = 0.0
    fan.run({"slow": slow_exporters})
    assert fan.wait_idle(5) and fan.suspects() == set()
