"""Throttle protection end to end on kafkasim over TCP (Prometheus scrapes + Kafka protocol).

The throttle loop samples every 5 simulated seconds (two samples per 10 s collection interval, so
the k=2 hysteresis still acts within one collection interval).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from controlplane.api.app import create_app
from controlplane.config import Settings, TokenConf, hash_token
from controlplane.service.context import ServiceContext
from domain.throttles import CONSUMER_QUOTA, MIGRATION, PARTITION_FETCH
from planners.protection import WHO
from tests.support.throttle_scenario import HOT_PARTITION, ThrottleScenario

COLLECTION_INTERVAL_S = 10.0
HIGH = 0.85
PT_FETCH = "guardian.partition.throttle.fetch.bytes.per.second"


@pytest.fixture()
def capable() -> Iterator[ThrottleScenario]:
    s = ThrottleScenario(partition_throttle=True)
    yield s
    s.close()


@pytest.fixture()
def vanilla() -> Iterator[ThrottleScenario]:
    s = ThrottleScenario(partition_throttle=False)
    yield s
    s.close()


def warm_up(s: ThrottleScenario, steps: int = 4) -> None:
    for _ in range(steps):
        s.step()
    assert not s.throttles(), "a calm cluster must not be throttled"


def run_incident(s: ThrottleScenario, lever_kind: str, max_steps: int = 60) -> dict:
    """Inject the lagging consumer and step until the protection throttle is released."""
    warm_up(s)
    base = s.truth()
    hot = base.leader_disk[HOT_PARTITION]
    s.lagging_consumer(lag_bytes=10e9, rate=160e6)
    s.advance(1.0)  # the first physics tick after the fault: the disk crosses its threshold here
    crossed = s.truth()
    assert crossed.util[hot] > HIGH
    t_cross = crossed.t
    t_throttle = t_recovered = t_released = None
    during = None
    for _ in range(max_steps):
        s.step()
        now = s.truth()
        active = s.throttles()
        if t_throttle is None and active:
            t_throttle = now.t
            (throttle,) = active.values()
            assert throttle["kind"] == lever_kind and throttle["set_by"] == WHO
        if t_throttle is not None and t_recovered is None and now.util[hot] < HIGH:
            t_recovered, during = now.t, now
        if t_throttle is not None and not active:
            t_released = now.t
            break
    assert t_throttle is not None and t_throttle - t_cross <= COLLECTION_INTERVAL_S
    assert t_recovered is not None and t_recovered - t_cross <= 3 * COLLECTION_INTERVAL_S
    assert t_released is not None, "the throttle must be released once the consumer has caught up"
    after = s.truth()
    assert after.lag[HOT_PARTITION] < 1e9  # caught up (the rest is served from the page cache)
    assert after.util[hot] < HIGH
    return {"base": base, "during": during, "after": after, "hot": hot}


def test_lagging_consumer_is_throttled_at_partition_level(capable: ThrottleScenario) -> None:
    r = run_incident(capable, PARTITION_FETCH)
    base, during = r["base"], r["during"]
    # unaffected clients: every other partition's produce and fetch throughput within +-5%
    for key, rate in base.fetch.items():
        if key == HOT_PARTITION or key[0].startswith("__") or rate <= 0:
            continue
        assert during.fetch[key] == pytest.approx(rate, rel=0.05), key
        assert during.produce[key] == pytest.approx(base.produce[key], rel=0.05), key
    assert PT_FETCH in during.topic_configs["orders"]  # in force while the disk recovers
    assert PT_FETCH not in r["after"].topic_configs["orders"]  # released: nothing left behind
    actions = capable.actions()
    sets = [a for a in actions if a["type"] == "throttle.set"]
    clears = [a for a in actions if a["type"] == "throttle.clear"]
    assert sets and clears and all(a["who"] == WHO for a in sets + clears)
    assert "abnormal" in sets[0]["why"] and sets[0]["subject"]["key"] == "fetch:orders:0"
    evidence = capable.service.explain("east")
    assert evidence["evaluated"] is True


def test_partition_throttle_is_in_force_on_the_cluster(capable: ThrottleScenario) -> None:
    warm_up(capable)
    capable.lagging_consumer(lag_bytes=10e9, rate=160e6)
    capable.step()
    capable.step()
    throttle = capable.throttles()["fetch:orders:0"]
    ev = throttle["evidence"]
    assert ev["util"] > HIGH and ev["causes"][0]["behaviour"] == "user_read"
    assert ev["queue"][0]["topic"] == "orders" and ev["queue"][0]["partition"] == 0
    value = capable.truth().topic_configs["orders"][PT_FETCH]
    assert value == f"0:{int(throttle['rate_bytes_per_s'])}"


def test_without_partition_capability_client_quotas_recover_the_disk(vanilla: ThrottleScenario) -> None:
    r = run_incident(vanilla, CONSUMER_QUOTA)
    assert r["after"].quotas == {} or all(not v for v in r["after"].quotas.values())
    sets = [a for a in vanilla.actions() if a["type"] == "throttle.set"]
    assert sets[0]["subject"]["key"] == "consumer-quota:billing"
    # the producers and the other topic's consumers were never touched
    for key, rate in r["base"].produce.items():
        if rate > 0 and not key[0].startswith("__"):
            assert r["during"].produce[key] == pytest.approx(rate, rel=0.05), key
    for key, rate in r["base"].fetch.items():
        if key[0] == "events" and rate > 0:
            assert r["during"].fetch[key] == pytest.approx(rate, rel=0.05), key


def test_reassignment_overload_slows_migration_not_users(capable: ThrottleScenario) -> None:
    warm_up(capable)
    base = capable.truth()
    leader = base.leader_disk[("events", 0)][0]
    target = next(b for b in (1, 2, 3) if b != leader)
    capable.reassign("events", 0, [leader, target])
    capable.advance(1.0)
    crossed = capable.truth()
    hot = [d for d, u in crossed.util.items() if u > HIGH]
    assert hot, "the copy must overload a disk"
    kinds: set[str] = set()
    recovered_at = None
    for _ in range(40):
        capable.step()
        now = capable.truth()
        kinds |= {t["kind"] for t in capable.throttles().values()}
        if kinds and recovered_at is None and all(now.util[d] < HIGH for d in hot):
            recovered_at = now.t
        if kinds and not capable.throttles() and not now.reassigning:
            break
    assert kinds == {MIGRATION}, "only the migration is slowed, never users"
    assert recovered_at is not None and recovered_at - crossed.t <= 3 * COLLECTION_INTERVAL_S
    final = capable.truth()
    assert final.reassigning == 0 and not capable.throttles()
    assert all("follower.replication.throttled.rate" not in c for c in final.broker_configs.values())
    assert not final.topic_configs["events"].get("follower.replication.throttled.replicas")


TOKENS = {"viewer": "v", "operator": "o"}


def test_alert_triggers_an_immediate_evaluation_through_http(capable: ThrottleScenario, tmp_path) -> None:
    settings = Settings(data_dir=tmp_path, tokens=[TokenConf(name=f"{r}-user", role=r, sha256=hash_token(t))
                                                   for r, t in TOKENS.items()])
    ctx = ServiceContext(settings=settings, store=capable.store, throttle=capable.service)
    headers = {"Authorization": "Bearer o"}
    warm_up(capable)
    capable.lagging_consumer(lag_bytes=10e9, rate=160e6)
    capable.step()  # one sample above the mark: k=2 not reached, nothing yet
    assert not capable.throttles()
    hot = capable.truth().leader_disk[HOT_PARTITION]
    labels = {"alertname": "DiskUtilHigh", "cluster": "east", "broker": str(hot[0]), "disk": hot[1]}
    alert: dict[str, Any] = {"status": "firing", "labels": labels, "startsAt": "2026-11-22T00:00:00Z",
                             "fingerprint": "abc123"}
    payload = {"version": "4", "status": "firing", "receiver": "guardian", "groupLabels": {}, "alerts": [alert]}
    with TestClient(create_app(ctx)) as client:
        assert client.post("/api/v1/alerts/alertmanager", json=payload).status_code == 401
        assert client.post("/api/v1/alerts/alertmanager", json=payload,
                           headers={"Authorization": "Bearer v"}).status_code == 403
        r = client.post("/api/v1/alerts/alertmanager", json=payload, headers=headers)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["firing"] == 1 and body["duplicates"] == 0
        (evaluation,) = body["evaluations"]
        assert [d["key"] for d in evaluation["decisions"]] == ["fetch:orders:0"]
        assert "on-call alert" in capable.throttles()["fetch:orders:0"]["why"]
        # the same alert again (Alertmanager repeat): idempotent, no evaluation, no new command
        n_actions = len(capable.actions())
        r = client.post("/api/v1/alerts/alertmanager", json=payload, headers=headers)
        assert r.json()["duplicates"] == 1 and r.json()["evaluations"] == []
        assert len(capable.actions()) == n_actions
        # resolved: recorded, no evaluation; resolving twice is a duplicate
        resolved = dict(payload, status="resolved", alerts=[dict(alert, status="resolved")])
        r = client.post("/api/v1/alerts/alertmanager", json=resolved, headers=headers)
        assert r.json()["resolved"] == 1 and r.json()["evaluations"] == []
        assert client.post("/api/v1/alerts/alertmanager", json=resolved, headers=headers).json()["duplicates"] == 1
        # alerts without disk labels are ignored, not errors
        other = dict(payload, alerts=[{"status": "firing", "labels": {"alertname": "X"}}])
        assert client.post("/api/v1/alerts/alertmanager", json=other, headers=headers).json()["ignored"] == 1
        # malformed payloads: 400 with the reason
        for bad, reason in [(b"{not json", ""), (b'{"alerts": "nope"}', "$.alerts"),
                            (b'{"alerts": [{"status": "burning", "labels": {}}]}', "$.alerts[0].status"),
                            (b'{"alerts": [{"status": "firing"}]}', "$.alerts[0].labels")]:
            r = client.post("/api/v1/alerts/alertmanager", content=bad,
                            headers={**headers, "Content-Type": "application/json"})
            assert r.status_code == 400 and reason in r.json()["detail"], (bad, r.text)
        bad_broker = dict(payload, alerts=[dict(alert, labels=dict(alert["labels"], broker="one"))])
        r = client.post("/api/v1/alerts/alertmanager", json=bad_broker, headers=headers)
        assert r.status_code == 400 and "labels.broker" in r.json()["detail"]
        # explain shows the evidence, the queue and the history
        ex = client.get("/api/v1/throttle/explain/east", headers={"Authorization": "Bearer v"}).json()
        assert ex["throttles"][0]["key"] == "fetch:orders:0"
        assert any(d["unhealthy"] and d["queue"] for d in ex["disks"])
        assert ex["history"][0]["type"] == "throttle.set"
