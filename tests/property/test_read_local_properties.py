"""Hypothesis properties of the read-local planner (KIP-392) through the shared invariant checker.

Every plan is valid under random bounds; leaders never change; a partition never loses a reading IDC it
had; every demanded partition ends with a replica in each reading IDC or is counted (and named) in the notes; the same
input (also after a dump/parse round trip) gives a byte-identical plan.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain import apply_plan, check_plan, dump_plan, dump_snapshot, parse_snapshot
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners import Bounds, ReadLocalOptions, plan_read_local
from planners.read_local import wanted_idcs

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def specs(draw: st.DrawFn) -> GeneratorSpec:
    n_idc = draw(st.integers(1, 3))
    return GeneratorSpec(
        brokers=draw(st.integers(3, 14)), disks_per_broker=draw(st.integers(1, 3)),
        partitions=draw(st.integers(0, 120)), replication_factor=draw(st.integers(1, 3)),
        seed=draw(st.integers(0, 2**31)), idcs=tuple(f"idc-{i}" for i in range(n_idc)),
        racks_per_idc=draw(st.integers(1, 3)),
        pools=draw(st.sampled_from([{"shared": 1.0}, {"shared": 0.7, "free": 0.3}])),
        dead_brokers=draw(st.integers(0, 1)), nvme_fraction=draw(st.sampled_from([0.0, 0.3])),
    )


bounds_st = st.builds(Bounds, max_bytes=st.none() | st.integers(0, 10**12),
                      max_partitions=st.none() | st.integers(0, 40),
                      capacity_headroom=st.sampled_from([0.0, 0.1, 0.45]))


@SETTINGS
@given(specs(), bounds_st, st.data())
def test_read_local_is_valid_keeps_leaders_never_loses_locality_and_is_deterministic(
        spec: GeneratorSpec, bounds: Bounds, data: st.DataObject) -> None:
    snap = generate_snapshot(spec)
    idcs = sorted({b.idc for b in snap.brokers})
    names = [t.name for t in snap.topics]
    demand = {name: {i: data.draw(st.sampled_from([0.0, 5e5, 2e6])) for i in idcs}
              for name in data.draw(st.lists(st.sampled_from(names), unique=True))} if names else {}
    options = ReadLocalOptions(bounds=bounds, threshold=1e6)
    plan = plan_read_local(snap, demand, options)
    assert check_plan(snap, plan, bounds.check_limits()) == []
    after = apply_plan(snap, plan)
    idc = {b.id: b.idc for b in snap.brokers}
    wanted = wanted_idcs(snap, demand, options.threshold)
    for move in plan.moves:
        assert move.topic in wanted
    for p in after.index.partitions:
        before = snap.index.partition_by_id[p.id]
        assert p.leader == before.leader
        had = {idc[b] for b in before.replicas} & set(wanted.get(p.topic, ()))
        assert had <= {idc[b] for b in p.replicas}
        if p.topic in wanted and before.replicas != p.replicas:
            assert len(set(p.replicas) - set(before.replicas)) == 1
    missing = sum(1 for name, reading in wanted.items() for p in after.index.topic_by_name[name].partitions
                  for i in reading if not any(idc[b] == i for b in p.replicas))
    stated = next((int(n.split(" ", 1)[0]) for n in plan.notes if "cannot get a local replica" in n), 0)
    if bounds.max_bytes is None and bounds.max_partitions is None:
        assert missing == stated  # every partition left remote is counted in the notes, with its reason
    else:
        assert missing >= stated
    again = plan_read_local(parse_snapshot(dump_snapshot(snap)), demand, options)
    assert dump_plan(again) == dump_plan(plan)
