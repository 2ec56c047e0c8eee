"""kafkasim's leased lines: sharing, latency, counters, and the engine's cross-IDC flows on them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kafkasim.physics.network import (
    FETCH,
    MIGRATION,
    PRODUCE,
    REPLICATION,
    LineSpec,
    Network,
    parse_cli_line,
    parse_lines,
    render_gateway,
)
from kafkasim.scenarios.scenario import ScenarioError, build_federation


def two_idc_net(cap: float = 10e6) -> Network:
    return Network([LineSpec("idc-a", "idc-b", cap, 2.0), LineSpec("idc-b", "idc-a", cap, 2.0)])


def test_max_min_fair_share_caps_the_line_and_leaves_other_flows_alone() -> None:
    net = two_idc_net(10e6)
    net.idc("idc-c")  # a third IDC: its lines are unlimited
    ab, ba, ac = net.line("idc-a", "idc-b"), net.line("idc-b", "idc-a"), net.line("idc-a", "idc-c")
    lines = np.array([ab, ab, ab, ba, ac, -1], dtype=np.int64)
    demand = np.array([6e6, 3e6, 11e6, 4e6, 50e6, 80e6])
    kinds = np.array([REPLICATION, MIGRATION, FETCH, PRODUCE, FETCH, FETCH], dtype=np.int64)
    f = net.share(lines, demand, kinds, dt=2.0)
    # 20 MB/s asked on a 10 MB/s line: the 3 MB/s flow gets all it asks, the two bigger ones split the other 7
    assert (demand * f)[:3] == pytest.approx([3.5e6, 3e6, 3.5e6])
    assert f[3:] == pytest.approx([1.0, 1.0, 1.0])  # not saturated, unlimited, same IDC
    assert net.granted[ab] == pytest.approx([3.5e6, 3e6, 3.5e6, 0.0])
    assert net.bytes_total[ab].sum() == pytest.approx(20e6)  # 10 MB/s for 2 s
    assert net.latency_ms[ab] == pytest.approx(100.0)  # saturated: 2 ms / (1 - 0.98)
    assert net.latency_ms[ba] == pytest.approx(2.0 / (1 - 0.4))
    assert net.latency_ms[ac] == pytest.approx(2.0)  # unlimited lines add their base latency only


def test_a_flow_that_asks_less_frees_capacity_for_the_others() -> None:
    net = two_idc_net(10e6)
    ab = net.line("idc-a", "idc-b")
    lines = np.array([ab, ab], dtype=np.int64)
    kinds = np.array([MIGRATION, FETCH], dtype=np.int64)
    before = net.share(lines, np.array([15e6, 6e6]), kinds, 1.0) * np.array([15e6, 6e6])
    after = net.share(lines, np.array([4e6, 6e6]), kinds, 1.0) * np.array([4e6, 6e6])
    assert before == pytest.approx([5e6, 5e6]) and after == pytest.approx([4e6, 6e6])


def test_parse_lines_and_cli_lines() -> None:
    specs = parse_lines({"lines": [{"between": ["a", "b"], "capacity_mb_s": 40},
                                   {"from": "a", "to": "c", "capacity_bytes_per_s": 5e6, "latency_ms": 7}]})
    assert [(s.src, s.dst, s.capacity_bps) for s in specs] == [("a", "b", 40e6), ("b", "a", 40e6), ("a", "c", 5e6)]
    assert specs[2].base_latency_ms == 7
    assert [(s.src, s.dst) for s in parse_cli_line("a>b=3")] == [("a", "b")]
    assert len(parse_cli_line("a:b=3")) == 2
    for bad in ({"lines": [{"between": ["a", "a"], "capacity_mb_s": 1}]},
                {"lines": [{"between": ["a", "b"], "capacity_mb_s": 0}]},
                {"lines": [{"between": ["a", "b"], "capacity_mb_s": "x"}]},
                {"lines": [{"capacity_mb_s": 1}]}, ["nope"]):
        with pytest.raises(ValueError):
            parse_lines(bad)
    with pytest.raises(ValueError):
        parse_cli_line("a:b")


def spec(line_mb_s: float | None, **topic: Any) -> dict[str, Any]:
    t = {"name": "t", "partitions": 8, "rf": 2, "bytes_in_per_s": 2e6, "size_gb": 1, "tail_groups": 1,
         "producer": {"client_id": "p", "idc": "idc-a"}, "consumer": {"client_id": "c", "idc": "idc-a"}}
    t.update(topic)
    out: dict[str, Any] = {"seed": 1, "clusters": [{"name": "c", "brokers": [
        {"count": 4, "idcs": ["idc-a", "idc-b"], "disks": [{"count": 2, "kind": "nvme"}]}], "topics": [t]}]}
    if line_mb_s is not None:
        out["network"] = {"lines": [{"between": ["idc-a", "idc-b"], "capacity_mb_s": line_mb_s}]}
    return out


def run(s: dict[str, Any], seconds: float = 60.0) -> Any:
    fed = build_federation(s)
    fed.engine.burst_rate_per_hour = 0.0
    fed.engine.advance(seconds)
    return fed


def test_a_saturated_line_cuts_cross_idc_fetches_only_and_counts_every_byte() -> None:
    free = run(spec(None, consumer={"client_id": "c", "idc": "idc-b"}))
    tight = run(spec(8, consumer={"client_id": "c", "idc": "idc-b"}))
    eng, ref = tight.engine, free.engine
    assert tight.engine.network is not None and free.engine.network is None
    cl = tight.clusters["c"]
    idc = {b.id: b.idc for b in cl.brokers.values()}
    for p in cl.topics["t"].partitions:
        out, ingress = eng.f["out_rate"][p.slot], eng.f["in_rate"][p.slot]
        if idc[p.leader] == "idc-b":  # consumer in idc-b reads its own IDC: all that was written (1 tail group)
            assert out == pytest.approx(ingress, rel=1e-6)
        else:  # the fetch crosses the full line: cut
            assert out < 0.9 * ingress
            assert eng.f["fetch_latency_ms"][p.slot] > ref.f["fetch_latency_ms"][p.slot] + 10
    report = eng.network.report()
    ab = next(line for line in report["lines"] if (line["src_idc"], line["dst_idc"]) == ("idc-a", "idc-b"))
    assert ab["total_bytes_per_s"] == pytest.approx(8e6, rel=1e-6) and ab["util"] > 1
    assert ab["bytes_per_s"]["replication"] > 0 and ab["bytes_per_s"]["fetch"] > 0
    text = render_gateway(eng.network, "idc-a", eng.t)
    tx = float(text.split('node_network_transmit_bytes_total{device="ll-idc-b"} ')[1].split()[0])
    assert tx == pytest.approx(sum(ab["bytes_total"].values()), abs=1.0)
    assert 'node_network_speed_bytes{device="ll-idc-b"} 8000000' in text


def test_an_unsaturated_line_changes_nothing_but_latency() -> None:
    free = run(spec(None))
    wide = run(spec(1000))
    assert np.allclose(free.engine.f["out_rate"], wide.engine.f["out_rate"])
    assert np.allclose(free.engine.f["in_rate"], wide.engine.f["in_rate"])
    assert all(len(p.isr) == 2 for p in wide.clusters["c"].topics["t"].partitions)


def test_a_line_too_thin_for_replication_drops_followers_out_of_the_isr() -> None:
    fed = run(spec(1, bytes_in_per_s=4e6), seconds=120)
    cl = fed.clusters["c"]
    idc = {b.id: b.idc for b in cl.brokers.values()}
    crossing = [p for p in cl.topics["t"].partitions if idc[p.replicas[0]] != idc[p.replicas[1]]]
    assert crossing and any(len(p.isr) == 1 and p.catchup for p in crossing)


def test_a_cross_idc_copy_shares_the_line() -> None:
    fed = build_federation(spec(20, bytes_in_per_s=0.0, tail_groups=0))
    eng, cl = fed.engine, fed.clusters["c"]
    eng.burst_rate_per_hour = 0.0
    p = cl.topics["t"].partitions[0]
    other = next(b.id for b in cl.brokers.values() if b.idc != cl.brokers[p.leader].idc and b.id not in p.replicas)
    cl.alter_reassignment("t", 0, [p.leader, other])
    eng.advance(10)
    assert eng.network is not None
    line = eng.network.line(cl.brokers[p.leader].idc, cl.brokers[other].idc)
    assert eng.network.granted[line][MIGRATION] == pytest.approx(20e6, rel=1e-6)
    assert p.reassignment is not None and math.isclose(p.reassignment.copied[other], 200e6, rel_tol=0.01)


def test_a_bad_network_section_names_its_path() -> None:
    with pytest.raises(ScenarioError, match=r"network.lines\[0\]"):
        build_federation({**spec(None), "network": {"lines": [{"between": ["idc-a"], "capacity_mb_s": 1}]}})
