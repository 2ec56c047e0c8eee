"""Leased-line accounting and protection end to end on kafkasim over TCP (two IDCs, one 55 MB/s line).

Each step is 5 simulated seconds: one collection round (Prometheus text, the Kafka protocol, the audit
topic) and one evaluation. The line's ground truth comes from kafkasim's network model; the figures are
printed (``pytest -s``) for the README.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from domain.throttles import CONSUMER_QUOTA, MIGRATION
from planners.line_protection import WHO
from tests.support.kafkasim_support import http_json, http_text
from tests.support.line_scenario import AB, CLUSTER, LINE_MB_S, LineScenario, Truth

HIGH = 0.85
CAP = LINE_MB_S * 1e6


@pytest.fixture()
def lines() -> Iterator[LineScenario]:
    s = LineScenario()
    yield s
    s.close()


def util(t: Truth) -> float:
    """The line's demand over its capacity (what it would carry unconstrained)."""
    return float(t.lines[AB]["demand_bytes_per_s"]) / CAP


def row(s: LineScenario, label: str) -> Truth:
    t = s.truth()
    ab = t.lines[AB]
    rep = s.lines.report(CLUSTER)
    g = next((x for x in rep["lines"] if (x["src_idc"], x["dst_idc"]) == AB), None)
    kinds = {k: round(v / 1e6, 1) for k, v in ab["bytes_per_s"].items()}
    throttles = {k: round(v["rate_bytes_per_s"] / 1e6, 2) for k, v in s.throttles().items()}
    print(f"{label:>8} t={t.t - 1_795_000_000:5.0f}s  line demand {util(t):5.2f} carried "
          f"{ab['total_bytes_per_s'] / 1e6:5.1f} MB/s {kinds} latency {ab['latency_ms']:6.1f} ms | guardian "
          f"{(g or {}).get('total_bytes_per_s', 0) / 1e6:5.1f} MB/s hot={(g or {}).get('hot')} | throttles {throttles}")
    return t


def in_idc(base: Truth, now: Truth, client_idc: str = "idc-a") -> list[tuple[str, int]]:
    """Partitions whose produce and fetch stay in ``client_idc`` and whose rates moved more than 2%."""
    moved = []
    for key, rate in base.produce.items():
        local = key[0] == "orders" and base.leader_idc[key] == client_idc
        if (local or key[0] == "replay") and abs(now.produce[key] - rate) > 0.02 * rate:
            moved.append(key)
        if local and abs(now.fetch[key] - base.fetch[key]) > 0.02 * base.fetch[key]:
            moved.append(key)
    return moved


def warm_up(s: LineScenario) -> Truth:
    for _ in range(4):
        s.step()
    base = row(s, "calm")
    assert not s.throttles() and util(base) < HIGH
    # accounting: Guardian's per-kind figures against the simulator's line, within 2%
    rep = s.lines.report(CLUSTER)
    g = next(x for x in rep["lines"] if (x["src_idc"], x["dst_idc"]) == AB)
    sim = base.lines[AB]["bytes_per_s"]
    for kind, sim_kind in (("replication", "replication"), ("client_fetch", "fetch"), ("client_produce", "produce")):
        assert g["bytes_per_s"][kind] == pytest.approx(sim[sim_kind], rel=0.02), kind
    assert g["capacity_bytes_per_s"] == CAP and rep["clients_known"] is True
    return base


def test_a_migration_that_fills_the_line_is_slowed_and_nothing_else(lines: LineScenario) -> None:
    base = warm_up(lines)
    lines.reassign({("replay", 0): [1, 4], ("replay", 1): [3, 2]})  # copies from idc-a to idc-b
    t0 = lines.truth().t
    saturated = held_at = None
    kinds: set[str] = set()
    worst_behind = 0.0
    for i in range(60):
        lines.step()
        now = row(lines, f"mig{i}")
        kinds |= {t["kind"] for t in lines.throttles().values()}
        worst_behind = max(worst_behind, now.repl_behind_s)
        if saturated is None and util(now) >= 1.0:
            saturated = now
        if held_at is None and kinds and util(now) < HIGH:
            held_at, during = now.t, now
            assert not in_idc(base, now), "in-IDC traffic must be untouched"
            # the cross-IDC consumer was not slowed either: migration alone made the room
            for key, rate in base.fetch.items():
                if key[0] == "replay":
                    assert now.fetch[key] == pytest.approx(rate, rel=0.02), key
        if held_at is not None and not now.reassigning and not lines.throttles():
            break
    assert saturated is not None and saturated.lines[AB]["latency_ms"] > 50  # the line filled, queues grew
    assert held_at is not None and held_at - t0 <= 4 * lines.step_s, "under the threshold within a few intervals"
    assert kinds == {MIGRATION}, "migration first: nothing else needed slowing"
    assert during.lines[AB]["latency_ms"] < 0.2 * saturated.lines[AB]["latency_ms"]
    # replication kept up: no follower left the ISR, none fell a second behind its leader
    final = lines.truth()
    assert worst_behind < 1.0
    assert all(len(final.isr[k]) == len(final.replicas[k]) for k in final.isr)
    # the migration finished under the line throttle, which was then released with nothing left behind
    assert final.reassigning == 0 and not lines.throttles()
    assert all("follower.replication.throttled.rate" not in c for c in final.broker_configs.values())
    sets = [a for a in lines.actions() if a["type"] == "throttle.set"]
    clears = [a for a in lines.actions() if a["type"] == "throttle.clear"]
    assert sets and clears and all(a["who"] == WHO for a in sets + clears)
    assert "leased line idc-a->idc-b hot" in sets[0]["why"] and "migration to broker" in sets[0]["why"]
    print(f"held under {HIGH} {held_at - t0:.0f} s after the copies started; "
          f"latency {saturated.lines[AB]['latency_ms']:.0f} -> {during.lines[AB]['latency_ms']:.1f} ms")


def test_a_cross_idc_replay_is_held_by_the_tenant_quota_and_released_after(lines: LineScenario) -> None:
    base = warm_up(lines)
    http_json(lines.control + "/fault/lagging-consumer", {"cluster": CLUSTER, "topic": "replay", "lag_bytes": 0.25e9,
                                                          "rate_bytes_per_s": 20e6})
    t0 = lines.truth().t
    held_at = released_at = caught_up_at = None
    kinds: set[str] = set()
    worst_behind = 0.0
    for i in range(80):
        lines.step()
        now = row(lines, f"replay{i}")
        kinds |= {t["kind"] for t in lines.throttles().values()}
        worst_behind = max(worst_behind, now.repl_behind_s)
        if held_at is None and kinds and util(now) < HIGH:
            held_at = now.t
            assert not in_idc(base, now), "in-IDC traffic must be untouched"
            quota = now.quotas.get("client-id=analytics", {}).get("consumer_byte_rate")
            assert quota is not None and quota >= lines.lines.config.min_rate_bytes_per_s
        if held_at is not None and caught_up_at is None and all(
                lag < 1e6 for (topic, _), lag in now.lag.items() if topic == "replay"):
            caught_up_at = now.t  # the replay job is done: its consumer leaves
            http_json(lines.control + "/fault/lagging-consumer", {"cluster": CLUSTER, "topic": "replay",
                                                                  "lag_bytes": 0, "rate_bytes_per_s": 0})
        if held_at is not None and not lines.throttles():
            released_at = now.t
            break
    assert held_at is not None and held_at - t0 <= 4 * lines.step_s
    assert kinds == {CONSUMER_QUOTA}
    assert caught_up_at is not None and released_at is not None, "released once the replay is over and the line calm"
    for i in range(3):  # the accounting follows the line again once the replay is over
        lines.step()
        after = row(lines, f"after{i}")
    g = next(x for x in lines.lines.report(CLUSTER)["lines"] if (x["src_idc"], x["dst_idc"]) == AB)
    assert g["total_bytes_per_s"] == pytest.approx(after.lines[AB]["total_bytes_per_s"], rel=0.03)
    final = lines.truth()
    assert final.quotas == {} and worst_behind < 1.0
    assert all(len(final.isr[k]) == len(final.replicas[k]) for k in final.isr)
    sets = [a for a in lines.actions() if a["type"] == "throttle.set"]
    assert sets[0]["subject"]["key"] == "consumer-quota:analytics" and "priority 1" in sets[0]["why"]
    print(f"held under {HIGH} {held_at - t0:.0f} s after the replay began; caught up after {caught_up_at - t0:.0f} s, "
          f"released after {released_at - t0:.0f} s")


def test_gateway_counters_and_the_api_view(lines: LineScenario) -> None:
    warm_up(lines)
    gw = lines.endpoints["gateways"]["idc-a"]
    text = http_text(gw)
    tx = float(text.split('node_network_transmit_bytes_total{device="ll-idc-b"} ')[1].split()[0])
    assert tx > 0 and f'node_network_speed_bytes{{device="ll-idc-b"}} {int(CAP)}' in text
    net = lines.network()
    assert {(x["src_idc"], x["dst_idc"]) for x in net["lines"]} == {AB, (AB[1], AB[0])}
    explain = lines.service.explain(CLUSTER)
    assert explain["leased_lines"]["evaluated"] is True
    assert {(x["src_idc"], x["dst_idc"]) for x in explain["leased_lines"]["lines"]} >= {AB}


def test_baseline_without_protection_the_migration_keeps_the_line_full() -> None:
    """The same migration with ``protect = false`` (accounting only): the line stays saturated, queues stay long."""
    s = LineScenario(protect=False)
    try:
        warm_up(s)
        s.reassign({("replay", 0): [1, 4], ("replay", 1): [3, 2]})
        full = []
        for i in range(4):  # the copies take ~20 s unthrottled: the line is full all along
            s.step()
            now = row(s, f"base{i}")
            full.append(util(now) >= 1.0 and now.lines[AB]["latency_ms"] > 50)
        assert all(full) and not s.throttles()
        rep = s.lines.report(CLUSTER)
        g = next(x for x in rep["lines"] if (x["src_idc"], x["dst_idc"]) == AB)
        assert rep["protect"] is False and g["hot"] is True and g["util"] == pytest.approx(1.0, abs=0.01)
    finally:
        s.close()
