"""The scenario generator is deterministic and its output obeys the hard constraints."""

from __future__ import annotations

from pathlib import Path

import pytest

from domain import Plan, check_plan, dump_snapshot, parse_snapshot
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from tests.support.examples import EXAMPLES

ROOT = Path(__file__).resolve().parents[2]


def test_same_spec_same_bytes_and_different_seed_differs() -> None:
    spec = GeneratorSpec(brokers=9, disks_per_broker=3, partitions=120, seed=3)
    a, b = dump_snapshot(generate_snapshot(spec)), dump_snapshot(generate_snapshot(spec))
    assert a == b
    assert dump_snapshot(generate_snapshot(GeneratorSpec(brokers=9, disks_per_broker=3, partitions=120, seed=4))) != a


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_committed_examples_are_reproducible(name: str) -> None:
    committed = (ROOT / "deploy" / "examples" / f"{name}.json").read_text().strip()
    assert dump_snapshot(generate_snapshot(EXAMPLES[name]), indent=1) == committed


def test_generated_assignment_respects_constraints() -> None:
    spec = GeneratorSpec(brokers=30, disks_per_broker=4, partitions=900, seed=11, idcs=("a", "b", "c"),
                         pools={"shared": 0.7, "pay": 0.2, "free": 0.1}, dead_brokers=2)
    snap = parse_snapshot(dump_snapshot(generate_snapshot(spec)))  # passes the file contract
    index = snap.index
    assert len(index.partitions) == 900
    pool_of = {b.id: b.pool for b in snap.brokers}
    for topic in snap.topics:
        assert topic.pool != "free"
        placement = snap.placement_of(topic)
        for p in topic.partitions:
            assert len(set(p.replicas)) == len(p.replicas) == 3
            assert {pool_of[b] for b in p.replicas} == {topic.pool}
            if placement:
                idcs = [index.broker_by_id[b].idc for b in p.replicas]
                assert all(idcs.count(idc) >= n for idc, n in placement.items())
            assert p.leader is None or index.broker_by_id[p.leader].is_alive
    # the identity plan (move every partition to where it is) is valid: generated state breaks nothing
    assert check_plan(snap, Plan(cluster=snap.cluster, kind="noop")) == []
    for d in index.disk_ids:
        assert index.disk_by_id[d].used_bytes <= 0.6 * index.disk_by_id[d].capacity_bytes + 1


def test_skew_makes_imbalance_and_uniform_less() -> None:
    from domain import pool_stats

    skewed = pool_stats(generate_snapshot(GeneratorSpec(brokers=20, partitions=800, seed=1)))["shared"]
    flat = pool_stats(generate_snapshot(GeneratorSpec(brokers=20, partitions=800, seed=1, skew="uniform",
                                                      nvme_fraction=0.0)))["shared"]
    assert skewed.peak_to_mean > flat.peak_to_mean
    assert flat.peak_to_mean < 2.0


@pytest.mark.parametrize("kwargs", [{"brokers": 0}, {"disks_per_broker": 0}, {"pools": {"x": 0}},
                                    {"dead_brokers": 12}, {"skew": "pareto"}, {"idcs": ()}])
def test_bad_specs_are_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        GeneratorSpec(**kwargs)  # type: ignore[arg-type]
