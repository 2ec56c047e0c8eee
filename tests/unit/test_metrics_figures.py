"""``/metrics``'s federation figures: the series a Grafana board needs, an age that really ages, a cheap scrape.

The speed test builds 100 clusters' worth of state (12 brokers x 4 disks, 600 partitions each, an active
execution and throttles) and times scrapes through the real ``/metrics`` route; it prints the figure."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from statistics import median

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from controlplane.api.app import create_app
from controlplane.config import Settings
from controlplane.service.context import ServiceContext
from controlplane.service.metrics_figures import FederationFigures
from controlplane.state.commands import meta
from controlplane.state.store import LocalStateStore
from domain import BrokerState, ClusterSnapshot
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

SCRAPE_BUDGET_S = 0.050


def snapshot(name: str, seed: int = 1, dead: int = 0) -> ClusterSnapshot:
    return generate_snapshot(GeneratorSpec(cluster=name, brokers=12, disks_per_broker=4, partitions=600, seed=seed,
                                           dead_brokers=dead))


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Parsed exposition: family name -> [(labels, value)] (parsing also proves the text is well-formed)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        out.setdefault(fam.name, []).extend((dict(s.labels), s.value) for s in fam.samples)
    return out


def state_with(clusters: list[str], executions: bool = True) -> LocalStateStore:
    store = LocalStateStore()
    m = meta("test")
    for name in clusters:
        store.propose({"type": "cluster.register", "meta": m, "name": name, "bootstrap_servers": ["127.0.0.1:1"]})
        store.propose({"type": "throttle.set", "meta": m, "cluster": name, "key": "leader-3",
                       "kind": "broker_leader", "target": {"broker": 3}, "rate_bytes_per_s": 5e6,
                       "evidence": {"manual": True}})
    return store


def test_snapshot_age_ages_with_the_clock_and_series_cover_the_board() -> None:
    figures = FederationFigures()
    snap = snapshot("east", dead=1)
    observed = datetime(2026, 1, 1, tzinfo=UTC)
    figures.observe(snap, observed)
    store = state_with(["east"])
    entries = lambda: [(snap, observed)]  # noqa: E731
    first = families(figures.exposition(entries, store.read, now=observed.timestamp() + 5))
    later = families(figures.exposition(entries, store.read, now=observed.timestamp() + 157))
    assert first["guardian_snapshot_age_seconds"] == [({"cluster": "east"}, 5.0)]
    assert later["guardian_snapshot_age_seconds"] == [({"cluster": "east"}, 157.0)]
    assert first["guardian_dead_brokers"] == [({"cluster": "east"}, 1.0)]
    assert first["guardian_brokers"] == [({"cluster": "east", "state": "alive"}, 11.0),
                                         ({"cluster": "east", "state": "dead"}, 1.0)]
    disks = first["guardian_disk_estimated_util"]
    assert len(disks) == 48 and {lb["kind"] for lb, _ in disks} <= {"hdd", "nvme", "ssd"}
    assert max(v for _, v in disks) > 0
    pool_max = first["guardian_pool_max_util"]
    alive_max = max(snap.index.disk_util_estimate((b.id, d.path)) for b in snap.brokers if b.is_alive
                    for d in b.disks)
    assert pool_max == [({"cluster": "east", "pool": "shared"}, alive_max)]
    assert first["guardian_pool_peak_to_mean"][0][1] >= 1.0
    assert first["guardian_partitions"] == [({"cluster": "east"}, 600.0)]
    assert 0 < first["guardian_partitions_with_rates"][0][1] <= 600
    assert first["guardian_throttles"] == [({"cluster": "east", "kind": "broker_leader"}, 1.0)]
    assert first["guardian_throttle_rate_bytes_per_second"][0][1] == 5e6


def test_a_new_snapshot_is_picked_up_and_a_removed_cluster_disappears() -> None:
    figures = FederationFigures()
    store = state_with([])
    now = datetime.now(UTC)
    a, b = snapshot("a"), snapshot("b", seed=2)
    held = [(a, now), (b, now)]
    text = figures.exposition(lambda: held, store.read)  # an imported snapshot: computed at the first scrape
    assert {lb["cluster"] for lb, _ in families(text)["guardian_partitions"]} == {"a", "b"}
    dead_a = replace(a, brokers=tuple(replace(x, state=BrokerState.DEAD) if x.id == a.brokers[0].id else x
                                      for x in a.brokers))
    held = [(dead_a, now + timedelta(seconds=1))]
    got = families(figures.exposition(lambda: held, store.read))
    assert got["guardian_dead_brokers"] == [({"cluster": "a"}, 1.0)]
    assert {lb["cluster"] for lb, _ in got["guardian_partitions"]} == {"a"}


def test_execution_progress_and_tasks_by_state_follow_the_state() -> None:
    store = state_with(["east"])
    figures = FederationFigures()
    # a running execution as the state machine keeps it (tasks, progress); set in place like a restore would
    store.read(lambda s: s["executions"].update({"7": {
        "id": 7, "cluster": "east", "status": "running", "progress": {
            "bytes_done": 100, "bytes_total": 400, "rate_bytes_per_s": 10.0, "eta_s": 30.0},
        "tasks": {"t1": {"state": "COMPLETED"}, "t2": {"state": "IN_PROGRESS"}, "t3": {"state": "PENDING"}}}}))
    store.read(lambda s: s.update(log_seq=s["log_seq"] + 1))
    got = families(figures.exposition(list, store.read))
    labels = {"cluster": "east", "execution": "7"}
    assert got["guardian_execution_bytes_done"] == [(labels, 100.0)]
    assert got["guardian_execution_bytes_total"] == [(labels, 400.0)]
    assert got["guardian_execution_eta_seconds"] == [(labels, 30.0)]
    assert sorted((lb["state"], v) for lb, v in got["guardian_execution_tasks"]) == [
        ("COMPLETED", 1.0), ("IN_PROGRESS", 1.0), ("PENDING", 1.0)]
    store.read(lambda s: s["executions"]["7"].update(status="completed"))
    store.read(lambda s: s.update(log_seq=s["log_seq"] + 1))
    assert "guardian_execution_bytes_done" not in families(figures.exposition(list, store.read))


def test_metrics_at_100_clusters_answers_within_budget(tmp_path: Path) -> None:
    names = [f"c{i:03d}" for i in range(100)]
    ctx = ServiceContext(settings=Settings(data_dir=tmp_path), store=state_with(names))
    base = snapshot("base", seed=5)
    observing = 0.0
    for name in names:
        snap = replace(base, cluster=name)
        ctx.snapshots.put(snap, observed_at=datetime.now(UTC))
        start = time.perf_counter()
        ctx.metrics.federation.observe(snap, datetime.now(UTC))  # what the collection job does as it publishes
        observing += time.perf_counter() - start
    client = TestClient(create_app(ctx))
    first = client.get("/metrics")
    assert first.status_code == 200
    got = families(first.text)
    assert len(got["guardian_disk_estimated_util"]) == 100 * 48
    assert len(got["guardian_snapshot_age_seconds"]) == 100
    times = []
    for _ in range(10):
        start = time.perf_counter()
        response = client.get("/metrics")
        times.append(time.perf_counter() - start)
        assert response.status_code == 200
    series = sum(1 for line in first.text.splitlines() if line and not line.startswith("#"))
    print(f"\n/metrics at 100 clusters: {series} series, {len(first.content) / 1e6:.1f} MB, "
          f"median {median(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms "
          f"(budget {SCRAPE_BUDGET_S * 1000:.0f} ms); "
          f"figures of a new snapshot {observing * 10:.1f} ms per cluster, off the scrape path")
    assert median(times) < SCRAPE_BUDGET_S


def test_a_registered_cluster_without_data_ages_on_the_leader_and_every_cluster_has_error_series(
        tmp_path: Path) -> None:
    ctx = ServiceContext(settings=Settings(data_dir=tmp_path), store=state_with(["east", "nodata"]))
    snap = snapshot("east")
    observed = datetime(2026, 1, 1, tzinfo=UTC)
    ctx.snapshots.put(snap, observed_at=observed)
    t0 = observed.timestamp()
    ctx.cluster_status.awaited_since(["east", "nodata"], now=t0 - 30)  # the leader's collection began here
    ctx.cluster_status.error("nodata", "collect", "metrics_auth", "HTTP 401")
    text = ctx.metrics.federation.exposition(ctx.snapshots.entries, ctx.store.read, now=t0 + 400,
                                             awaited=ctx.cluster_status.expected(),
                                             errors=ctx.cluster_status.error_counts)
    got = families(text)
    assert dict((lb["cluster"], v) for lb, v in got["guardian_snapshot_age_seconds"]) == {"east": 400.0,
                                                                                        "nodata": 430.0}
    errors = {(lb["cluster"], lb["kind"]): v for lb, v in got["guardian_cluster_errors"]}
    assert errors[("nodata", "metrics_auth")] == 1.0
    assert errors[("east", "metrics_auth")] == 0.0 and len(errors) == 2 * 6
    # a follower (nothing awaited) exports no age for a cluster it never observed
    follower = families(ctx.metrics.federation.exposition(ctx.snapshots.entries, ctx.store.read, now=t0 + 400))
    assert [lb["cluster"] for lb, _ in follower["guardian_snapshot_age_seconds"]] == ["east"]
