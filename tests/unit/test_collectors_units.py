"""Unit tests of the collectors' pure parts: parsing, rates, windows, page cache, coverage, rollups."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from collectors.build.state import BrokerBook
from collectors.build.topology import map_payloads
from collectors.completeness import Coverage, SnapshotRefused, UsabilityPolicy, refusal_reasons, require_usable
from collectors.history import RingWindow, window_bytes
from collectors.pagecache import Behaviours, is_disk_read, residence_seconds
from collectors.promtext import PayloadError, check_payload, parse_fast, parse_reference
from collectors.rates import CounterTracker, DropLog, DropReason, counter_rate, gauge_value
from collectors.scraped import RoundResult, ScrapeResult
from domain import Broker, ClusterSnapshot, Disk, DiskKind
from kafkaio.endpoints import (
    BrokerInfo,
    ClusterEndpoints,
    EndpointsError,
    MetricsEndpoint,
    endpoints_from_options,
    parse_endpoints,
)
from kafkaio.types import BrokerMeta, KafkaState, PartitionMeta, Reassignment

TEXT = """# HELP x_total a counter
# TYPE x_total counter
x_total 10
x_total{a="1",b="two words"} 2.5e3
y{path="/data1",q="with \\"quote\\" and \\\\ slash"} NaN
y{path="/data2"} +Inf
z -Inf 1700000000000
"""


def test_fast_parser_matches_reference() -> None:
    fast = parse_fast(TEXT)
    ref = parse_reference(TEXT)
    assert fast.bad_lines == 0
    norm = {k: sorted((tuple(sorted(lab.items())), repr(v)) for lab, v in vals) for k, vals in fast.families.items()}
    nref = {k: sorted((tuple(sorted(lab.items())), repr(v)) for lab, v in vals) for k, vals in ref.families.items()}
    assert norm == nref
    assert fast.get("y")[0][0]["q"] == 'with "quote" and \\ slash'
    assert math.isnan(fast.get("y")[0][1])
    assert fast.scalar("x_total") == 10


def test_fast_parser_keeps_only_wanted_and_flags_garbage() -> None:
    p = parse_fast(TEXT, {"x_total"})
    assert set(p.families) == {"x_total"} and p.samples == 2
    g = parse_fast("<html>\nnot { prometheus\n\x00\x01\n", {"x_total"})
    assert g.bad_lines == 3
    with pytest.raises(PayloadError):
        check_payload(g)
    with pytest.raises(PayloadError):
        check_payload(parse_fast(""))
    with pytest.raises(PayloadError):
        parse_reference("x{a=1 2\n")
    bad_value = parse_fast("x_total abc\nx_total 1 2 3\nx_total 4\n")
    assert bad_value.bad_lines == 2 and bad_value.samples == 1


def test_counter_rate_reasons() -> None:
    assert counter_rate(0, 0, 10, 100).value == 10
    assert counter_rate(None, None, 10, 100).reason is DropReason.FIRST_SAMPLE
    assert counter_rate(0, 0, None, None).reason is DropReason.MISSING
    assert counter_rate(0, 0, 10, math.nan).reason is DropReason.NON_FINITE
    assert counter_rate(0, 0, 10, math.inf).reason is DropReason.NON_FINITE
    assert counter_rate(0, 0, 10, -1).reason is DropReason.NEGATIVE
    assert counter_rate(0, 50, 10, 10).reason is DropReason.COUNTER_RESET
    assert counter_rate(0, 0, 0.001, 1e9).reason is DropReason.TINY_ELAPSED
    assert counter_rate(10, 0, 5, 1).reason is DropReason.CLOCK_BACKWARDS
    assert counter_rate(0, 0, 1, 1e13, max_rate=1e12).reason is DropReason.IMPLAUSIBLE
    assert gauge_value(math.nan).reason is DropReason.NON_FINITE
    assert gauge_value(-3).reason is DropReason.NEGATIVE
    assert gauge_value(2.0, hi=1.0).reason is DropReason.IMPLAUSIBLE
    assert gauge_value(0.5).value == 0.5


def test_tracker_keeps_base_over_tiny_interval_and_rebases_after_reset() -> None:
    tr = CounterTracker(min_elapsed_s=1.0, forget_after=2)
    assert tr.update("a", 0.0, 0.0).reason is DropReason.FIRST_SAMPLE
    assert tr.update("a", 0.01, 1e6).reason is DropReason.TINY_ELAPSED  # a GC pause, not infinity
    assert tr.update("a", 10.0, 100.0).value == pytest.approx(10.0)  # measured from t=0
    assert tr.update("a", 20.0, 5.0).reason is DropReason.COUNTER_RESET
    assert tr.update("a", 30.0, 105.0).value == pytest.approx(10.0)  # new base after the reset
    assert tr.update("a", 40.0, math.nan).reason is DropReason.NON_FINITE
    assert tr.update("a", 50.0, 305.0).value == pytest.approx(10.0)  # NaN did not replace the base
    for _ in range(4):
        tr.end_round()
    assert len(tr) == 0
    log = DropLog()
    log.add("disk.util", DropReason.COUNTER_RESET, "broker 1 sda")
    assert log.as_dict() == {"disk.util": {"counter_reset": 1}} and log.total == 1


def test_ring_window_stats_before_the_first_averaged_column() -> None:
    w = RingWindow(capacity=4, initial_rows=1, every=3)
    w.append_array(["a", "b"], np.array([1.0, 2.0]))  # averaging: no column written yet
    st = w.stats()
    assert set(st) == {"a", "b"} and st["a"][2] == 0 and math.isnan(st["a"][0]) and math.isnan(st["a"][1])
    w.append_array(["a", "b"], np.array([3.0, 2.0]))
    w.append_array(["a", "b"], np.array([5.0, 2.0]))
    assert w.stats(["a"])["a"] == (3.0, 3.0, 1)


def test_ring_window_bounds_and_stats() -> None:
    w = RingWindow(capacity=5, initial_rows=1)
    for i in range(12):
        w.append({"a": float(i), "b": None if i % 2 else float(10 * i), f"tmp{i}": 1.0})
    assert w.series("a") == [7.0, 8.0, 9.0, 10.0, 11.0]
    assert w.series("b") == [80.0, 100.0]
    med, p95, n = w.stats(["a"])["a"]
    assert med == 9.0 and n == 5 and 10.0 < p95 <= 11.0
    assert w.downsampled("a", 2) == [pytest.approx(8.0), pytest.approx(10.5)]
    assert len(w) <= 2 + 10  # rows of keys unseen for a window are recycled
    rows_before = w._data.shape[0]
    for i in range(50):
        w.append({"a": 1.0, f"new{i % 3}": 2.0})
    assert w._data.shape[0] <= max(rows_before, 16)
    assert window_bytes(100_000, 360) == 144_000_000
    with pytest.raises(ValueError):
        RingWindow(0)


def test_page_cache_rule() -> None:
    t = residence_seconds(10e9, 100e6)
    assert t == 100.0
    assert residence_seconds(10e9, 0) == math.inf
    assert residence_seconds(0, 1e6) == 0.0
    assert residence_seconds(math.nan, 1e6) == 0.0
    # LEO 1e6, 1000 msg/s, T = 100 s: offsets older than 900_000 come from disk
    assert is_disk_read(1e6, 1000, 100, 899_999)
    assert not is_disk_read(1e6, 1000, 100, 900_000)
    assert not is_disk_read(1e6, 1000, math.inf, 0)
    assert is_disk_read(1e6, math.nan, 100, 999_999)  # unknown rate: only the exact tail is cached
    b = Behaviours(user_read=1, user_write=2, replication_write=3, migration_read=4, measured_read=10, measured_write=5)
    d = b.as_dict()
    assert d["unattributed_read"] == 5 and d["unattributed_write"] == 0


def _snap(taken: datetime, cov: Coverage | None) -> ClusterSnapshot:
    b = Broker(1, "h", 1, "a", "r", disks=(Disk("/d", DiskKind.HDD, 10, 1.0),))
    return ClusterSnapshot("c", taken, (b,), (), extra={"coverage": cov} if cov else {})


def test_refusal_helper() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    good = Coverage("c", now.timestamp(), brokers_alive=[1, 2], brokers_with_metrics=[1, 2], partitions_total=10,
                    partitions_with_rates=10)
    assert refusal_reasons(_snap(now, good), now=now.timestamp()) == []
    stale = refusal_reasons(_snap(now - timedelta(minutes=5), good), now=now.timestamp())
    assert stale and "stale" in stale[0]
    partial = Coverage("c", 0, brokers_alive=[1, 2], brokers_with_metrics=[1], partitions_total=10,
                       partitions_with_rates=5, first_round=True)
    reasons = refusal_reasons(_snap(now, partial), now=now.timestamp())
    assert len(reasons) == 3
    assert refusal_reasons(_snap(now, partial), UsabilityPolicy(min_broker_fraction=0.5, min_partition_fraction=0.5,
                                                                allow_first_round=True), now=now.timestamp()) == []
    assert "no coverage information" in refusal_reasons(_snap(now, None), now=now.timestamp())[0]
    moving = replace(good, unknown_log_dirs=2)  # metadata names a new replica DescribeLogDirs has not shown yet
    assert "2 replica(s) on a log dir no broker reported yet" in refusal_reasons(_snap(now, moving),
                                                                                  now=now.timestamp())[0]
    assert refusal_reasons(_snap(now, moving), UsabilityPolicy(max_unknown_log_dirs=2), now=now.timestamp()) == []
    with pytest.raises(SnapshotRefused) as exc:
        require_usable(_snap(now, partial), now=now.timestamp())
    assert exc.value.reasons == reasons


def test_endpoints_parsing_errors() -> None:
    doc = {"clusters": {"east": {"bootstrap_servers": "127.0.0.1:1", "metrics_urls": ["http://x/m"],
                                 "brokers": [{"id": 1, "metrics_url": "http://y/m", "idc": "a"}]}}}
    eps = parse_endpoints(doc, "east")
    assert eps.metrics_urls == ["http://y/m", "http://x/m"] and eps.url_to_brokers() == {"http://y/m": (1,)}
    with pytest.raises(EndpointsError, match="no cluster 'west'"):
        parse_endpoints(doc, "west")
    with pytest.raises(EndpointsError, match="bootstrap_servers"):
        parse_endpoints({"clusters": {"east": {}}}, "east")
    with pytest.raises(EndpointsError):
        endpoints_from_options("c", "h:1", ["ftp://nope"])
    e2 = endpoints_from_options("c", "h:1", ["3=http://a/m", "http://b/m"])
    assert e2.url_to_brokers() == {"http://a/m": (3,)} and e2.unmapped_metrics_urls == ("http://b/m",)


def test_ring_window_averages_rounds_when_every_is_above_one() -> None:
    w = RingWindow(capacity=3, every=2)
    for v in (1.0, 3.0, 10.0, None, 5.0, 7.0, 100.0, 200.0):
        w.append({"a": v})
    # pairs (1,3) (10,-) (5,7) (100,200) -> 2, 10, 6, 150; the window keeps the last 3
    assert w.series("a") == [10.0, 6.0, 150.0]
    assert w.nbytes == w._data.shape[0] * (3 * 4 + 8 + 8 + 4 + 1)  # float32 samples + per-row bookkeeping


def test_rollup_rows_per_minute() -> None:
    from collectors.builder import Collected
    from collectors.collector import RollupAggregator
    from domain import Partition, Topic

    def snap(at: datetime, util: float, rate: float) -> Collected:
        b = Broker(1, "h", 1, "a", "r", disks=(Disk("/d", DiskKind.HDD, 10, 1.0, util=util),))
        t = Topic("t", (Partition("t", 0, (1,), 1, (1,), ("/d",), bytes_in_per_s=rate),))
        s = ClusterSnapshot("c", at, (b,), (t,))
        return Collected(s, Coverage("c", at.timestamp()), {}, {}, {}, [])

    agg = RollupAggregator()
    t0 = datetime(2026, 1, 1, 10, 0, 5, tzinfo=UTC)
    assert agg.add(snap(t0, 0.2, 100.0)) == []
    assert agg.add(snap(t0 + timedelta(seconds=30), 0.4, 300.0)) == []
    rows = agg.add(snap(t0 + timedelta(seconds=60), 0.9, 0.0))  # a new minute closes the first
    disk = next(r for r in rows if r["kind"] == "disk")
    part = next(r for r in rows if r["kind"] == "partition")
    assert disk["minute"] == datetime(2026, 1, 1, 10, 0, tzinfo=UTC) and disk["samples"] == 2
    assert disk["util_avg"] == pytest.approx(0.3) and disk["util_max"] == pytest.approx(0.4)
    assert part["bytes_in_per_s_avg"] == pytest.approx(200.0) and part["bytes_in_per_s_max"] == 300.0
    last = agg.flush()
    assert [r["samples"] for r in last] == [1, 1]


def test_window_append_array_equals_append_and_recycles() -> None:
    """append_array (the builder's path) and append (dict) agree, with every > 1, a key list that
    changes, NaN samples; keys that vanish are recycled after a whole window."""
    import numpy as np

    rng = np.random.default_rng(5)
    a, b = RingWindow(4, 2, every=3), RingWindow(4, 2, every=3)
    keys = [("t", i) for i in range(6)]
    for r in range(60):
        ks = keys if r < 20 else [*keys[:3], ("u", r % 4)]
        vals = rng.random(len(ks))
        vals[rng.random(len(ks)) < 0.2] = np.nan
        a.append({k: (None if np.isnan(v) else float(v)) for k, v in zip(ks, vals, strict=True)})
        b.append_array(ks, vals)
    assert set(a._row) == set(b._row) and ("t", 5) not in b._row  # recycled
    for k in a._row:
        assert a.series(k) == b.series(k)
    assert len(b._free) + len(b._row) == b._n_rows


def test_window_downsampled_many_equals_one_by_one() -> None:
    """The vectorised load_history path gives exactly downsampled() per key: full windows, gaps,
    a wrapped ring, fewer samples than points, and unknown keys."""
    import numpy as np

    rng = np.random.default_rng(3)
    for capacity, rounds, points in ((10, 7, 4), (10, 23, 4), (36, 100, 6), (5, 3, 6)):
        w = RingWindow(capacity)
        for r in range(rounds):
            w.append({k: (None if (k == "gappy" and r % 3 == 0) else float(rng.random()))
                      for k in ("a", "b", "gappy")})
        keys = ["a", "gappy", "missing", "b"]
        many = w.downsampled_many(keys, points, 0.0, 1.0)
        for k, got in zip(keys, many, strict=True):
            exp = [min(max(x, 0.0), 1.0) for x in w.downsampled(k, points)]
            assert got == pytest.approx(exp, rel=1e-6, abs=1e-7), (capacity, rounds, k)


def test_window_stats_equal_numpy_nan_percentiles() -> None:
    """stats() (one sort per block) gives np.nanmedian / np.nanpercentile(95) exactly, gaps and
    all-NaN rows included, before and after the ring wraps."""
    import warnings

    import numpy as np

    rng = np.random.default_rng(0)
    for cap, rounds in ((7, 3), (7, 7), (7, 20), (60, 100)):
        w = RingWindow(cap)
        keys = list(range(50))
        for _ in range(rounds):
            v = rng.random(50)
            v[rng.random(50) < 0.3] = np.nan
            v[:2] = np.nan
            w.append_array(keys, v)
        st = w.stats()
        rows = np.asarray([w._row[k] for k in keys])
        blk = (w._data[rows][:, : w.count] if w.count < cap else w._data[rows]).astype(float)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            em, ep = np.nanmedian(blk, axis=1), np.nanpercentile(blk, 95, axis=1)
        for i, k in enumerate(keys):
            m, p, n = st[k]
            assert n == int(np.sum(~np.isnan(blk[i])))
            assert (math.isnan(m) and math.isnan(em[i])) or m == pytest.approx(em[i], abs=1e-9)
            assert (math.isnan(p) and math.isnan(ep[i])) or p == pytest.approx(ep[i], abs=1e-9)


def test_admin_details_rotate_over_brokers_and_follow_reassignments() -> None:
    """After the first (full) admin round each round re-reads log dirs of one 1/N slice of the
    brokers — every broker within N rounds — plus at once the replicas of partitions being moved."""
    from typing import Any

    from collectors.collector import ClusterCollector

    calls: list[dict[str, Any]] = []

    class Recorder:
        def fetch(self, full: bool = True, previous: Any = None, refresh_brokers: Any = (),
                  refresh_topics: Any = ()) -> KafkaState:
            calls.append({"full": full, "brokers": set(refresh_brokers), "topics": set(refresh_topics)})
            return state

        def close(self) -> None:
            pass

    brokers = {b: BrokerMeta(b, "h", 1, None) for b in range(1, 13)}
    parts = {(f"t{i}", 0): PartitionMeta(f"t{i}", 0, (1, 2, 3), 1, (1, 2, 3)) for i in range(12)}
    state = KafkaState("c", 1, brokers, parts)
    col = ClusterCollector(endpoints_from_options("c", "h:1", ["1=http://a/m"]), source=Recorder(),  # type: ignore[arg-type]
                           full_admin_every=4)
    try:
        col.last_state = col._fetch()
        assert calls[0]["full"] is True
        for _ in range(4):
            col._fetch()
        rounds = calls[1:]
        assert all(not c["full"] and len(c["brokers"]) == 3 for c in rounds)
        assert set().union(*(c["brokers"] for c in rounds)) == set(brokers)
        assert set().union(*(c["topics"] for c in rounds)) == {t for t, _ in parts}
        state.reassignments[("t5", 0)] = Reassignment((7, 8, 9, 1, 2, 3), (7, 8, 9), (1, 2, 3))
        col._fetch()
        assert {1, 2, 3, 7, 8, 9} <= calls[-1]["brokers"] and "t5" in calls[-1]["topics"]
    finally:
        col.close()


@pytest.mark.parametrize("text", [
    'a_total 1\na_total{x="1"} 2\na_total{x="2"} 3\n',  # an unlabelled sample leads a labelled run
    'b{x="a} b"} 1\nb{x="c"} 2\n',  # "} " inside a label value
    'c{x="q\\"uote",y="back\\\\slash"} 1.5\nc{x="n\\nl"} 2\n',
    'd{x="1"} 1 1700000000000\nd{x="2"} 2 1700000000001\n',  # timestamps
    'e{x="1",} 3\ne{x="2"} 4\n',
    '# HELP f help\n# TYPE f gauge\nf NaN\ng +Inf\nh -Inf\n',
    'i{ x = "1" } 5\ni{x="2"}  6\n',
    'j{x="1"} 1\r\nj{x="2"} 2\r\n',
    'k{} 7\nk{x="1"} 8\n',
    '  l{x="1"} 1\nl{x="2"} 2\n',
])
def test_fast_parser_paths_agree_with_reference(text: str) -> None:
    """Every shape that leaves the C fast path (and the fast path itself) parses like prometheus_client."""
    fast, ref = parse_fast(text), parse_reference(text)
    assert fast.bad_lines == 0
    norm = {k: sorted((tuple(sorted(lab.items())), repr(v)) for lab, v in vals) for k, vals in fast.families.items()}
    nref = {k: sorted((tuple(sorted(lab.items())), repr(v)) for lab, v in vals) for k, vals in ref.families.items()}
    assert norm == nref


def test_a_host_exporter_shared_by_two_brokers_is_each_ones_and_its_failure_names_both() -> None:
    node = MetricsEndpoint("http://h:9100/metrics", kind="node")
    eps = ClusterEndpoints("c", "h:1", (BrokerInfo(1, "http://h:7071/metrics", metrics=(node,)),
                                        BrokerInfo(2, "http://h:7072/metrics", metrics=(node,))))
    assert eps.metrics_urls.count(node.url) == 1  # one scrape per round

    def ok(url: str, text: str) -> ScrapeResult:
        return ScrapeResult(url, payload=parse_fast(text), received=5.0)
    scrape = RoundResult({"http://h:7071/metrics": ok("http://h:7071/metrics", "kafka_a 1\n"),
                          "http://h:7072/metrics": ok("http://h:7072/metrics", "kafka_a 2\n"),
                          node.url: ok(node.url, 'node_disk_io_time_seconds_total{device="sda"} 7\n')})
    cov = Coverage("c", 0.0)
    got = map_payloads(scrape, BrokerBook(eps), (), False, cov).brokers
    for bid, own in ((1, 1.0), (2, 2.0)):  # each broker: its own JMX family, the host's disks
        payload = got[bid][0]
        assert payload.raw["kafka_a"][1] == [own] and payload.raw["node_disk_io_time_seconds_total"][1] == [7.0]
    assert cov.metrics_failed_urls == {} and cov.endpoints_failed == {}
    scrape.results[node.url] = ScrapeResult(node.url, error="timed out after 5 s")
    cov = Coverage("c", 0.0)
    got = map_payloads(scrape, BrokerBook(eps), (), False, cov).brokers
    assert cov.endpoints_failed == {node.url: "timed out after 5 s"}
    assert set(cov.metrics_failed) == {1, 2} and all(node.url in why for why in cov.metrics_failed.values())
    assert set(got) == {1, 2}  # their JMX payloads are still used
