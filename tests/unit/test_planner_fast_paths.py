"""The planner-speed shortcuts (#20) give exactly what the general code gives: plans, workspace state, figures."""

from __future__ import annotations

import heapq
import random
from dataclasses import replace

import numpy as np
import pytest

from domain import Partition, PartitionMove, Plan, apply_plan, dump_plan, plan_effect, summarize_effect, summarize_plan
from domain.apply import reassigned
from domain.spread import placement_deficit, rack_spread_broken
from domain.summary import _after_disk_loads_by_disk, after_disk_loads
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot
from planners import disk_balance, plan_rebalance, workspace
from planners.constraints import Topology
from planners.workspace import Workspace


@pytest.fixture(autouse=True)
def _python_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check the Python loop's shortcuts against its general code: no compiled loop here."""
    monkeypatch.setattr(disk_balance, "COMPILED", False)


SPEC = GeneratorSpec(brokers=30, disks_per_broker=6, partitions=1500, skew="zipf", seed=3, idcs=("idc-a", "idc-b"),
                     nvme_fraction=0.25)


def _by_assign(ws: Workspace, p: Partition, position: int, target: int) -> None:
    replicas, dirs = ws.replicas(p)
    b, d = ws.disk_ids[target]
    ws.assign(p, (*replicas[:position], b, *replicas[position + 1:]), (*dirs[:position], d, *dirs[position + 1:]))


def _state(ws: Workspace) -> tuple[object, ...]:
    return (ws.load.tobytes(), ws.util_arr.tobytes(), ws.proj.tobytes(), ws.used.tobytes(), ws.room.tobytes(),
            ws.room_floor, dict(ws.current), dict(ws.copied), dict(ws.cost), ws.moved_bytes, ws.moved_partitions,
            dict(ws.leader_override))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_move_replica_leaves_the_state_assign_leaves(seed: int) -> None:
    """Random moves (leaders, intra-broker, back and forth, leader overrides): bit-identical arrays and counters."""
    snap = generate_snapshot(replace(SPEC, seed=seed))
    fast, slow = Workspace(snap), Workspace(snap)
    rng = random.Random(seed)
    parts = [p for p in snap.index.partitions if p.leader is not None]
    for step in range(600):
        p = rng.choice(parts)
        replicas, _ = fast.replicas(p)
        if step % 7 == 0:
            leader = rng.choice(replicas)
            fast.set_leader(p, leader)
            slow.set_leader(p, leader)
            continue
        position = rng.randrange(len(replicas))
        target = rng.randrange(len(fast.disk_ids))
        broker = int(fast.disk_broker[target])
        if broker in replicas and broker != replicas[position]:
            continue
        if (broker, fast.disk_ids[target][1]) == (replicas[position], fast.replicas(p)[1][position]):
            continue
        fast.move_replica(p, position, target)
        _by_assign(slow, p, position, target)
        assert _state(fast) == _state(slow)


def test_rebalance_plan_is_the_one_assign_alone_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = generate_snapshot(replace(SPEC, brokers=40, partitions=4000))
    fast = plan_rebalance(snap)
    monkeypatch.setattr(Workspace, "move_replica", _by_assign)
    assert fast.moves and dump_plan(fast) == dump_plan(plan_rebalance(snap))


@pytest.mark.parametrize("seed", [1, 2])
def test_after_disk_loads_by_columns_equal_the_disk_by_disk_sums(seed: int) -> None:
    snap = generate_snapshot(replace(SPEC, seed=seed))
    plan = plan_rebalance(snap)
    effect = plan_effect(snap, plan)
    assert effect.partitions
    fast, slow = after_disk_loads(snap, effect.partitions), _after_disk_loads_by_disk(snap, effect.partitions)
    assert {d: fast[d] for d in slow} == slow  # exact floats: same summation order
    assert summarize_effect(snap, plan, effect) == summarize_plan(snap, apply_plan(snap, plan), plan)


def test_after_disk_loads_falls_back_for_unknown_log_dirs() -> None:
    snap = generate_snapshot(SPEC)
    p = snap.index.partitions[0]
    plan = Plan(cluster=snap.cluster, kind="x",
                moves=(PartitionMove(p.topic, p.partition, p.replicas, ("/nowhere", *p.log_dirs[1:])),))
    changed = plan_effect(snap, plan).partitions
    assert after_disk_loads(snap, changed) == _after_disk_loads_by_disk(snap, changed)


def test_reassigned_is_replace() -> None:
    p = Partition("t", 3, (1, 2, 3), 2, (2, 3), ("/a", "/b", "/c"), size_bytes=7, bytes_in_per_s=1.5,
                  bytes_out_per_s=2.5, messages_in_per_s=3.5, disk_read_bytes_per_s=4.5)
    got = reassigned(p, (4, 2, 3), ("/d", "/b", "/c"), 4)
    assert got == replace(p, replicas=(4, 2, 3), log_dirs=("/d", "/b", "/c"), leader=4, isr=(4, 2, 3))


def test_replica_columns_match_the_partitions() -> None:
    snap = generate_snapshot(SPEC)
    cols = snap.index.replica_columns
    disk_ids = snap.index.disk_ids
    for k, p in enumerate(snap.index.partitions):
        span = slice(int(cols.start[k]), int(cols.start[k + 1]))
        assert [disk_ids[i] for i in cols.disk[span]] == list(zip(p.replicas, p.log_dirs, strict=True))
        assert np.array_equal(cols.load[span], [p.replica_load(b) for b in p.replicas])
        assert cols.position[p.id] == k


@pytest.mark.parametrize(("walk", "slack"), [(48, 3), (2, 3), (0, 1), (1000, 1)])
def test_heap_scan_gives_the_full_scans_plan(walk: int, slack: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lazy heap of a large group (:class:`planners.workspace._Heap`, used from 1k disks) forced onto a small
    cluster, also with short walks (fallbacks) and a rebuild on every change: the plan the full numpy scan gives."""
    snap = generate_snapshot(replace(SPEC, brokers=40, partitions=4000, seed=walk + slack))
    full = plan_rebalance(snap)
    monkeypatch.setattr(workspace, "HEAP_MIN_DISKS", 0)
    monkeypatch.setattr(workspace, "HEAP_WALK", walk)
    monkeypatch.setattr(workspace, "HEAP_SLACK", slack)
    assert full.moves and dump_plan(plan_rebalance(snap)) == dump_plan(full)


def test_order_key_orders_as_the_floats() -> None:
    values = [-np.inf, -1e300, -2.5, -1e-300, -0.0, 0.0, 5e-324, 1e-300, 0.5, 1.0, 1e300, np.inf]
    keys = [workspace._order_key(int(np.float64(v).view(np.int64))) for v in values]
    assert keys == sorted(keys) and keys[4] == keys[5] == 0 and len(set(keys)) == len(values) - 1


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_heap_scan_answers_as_the_full_scan(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random moves on a workspace with tied and negative projections: every heap answer is the full scan's."""
    monkeypatch.setattr(workspace, "HEAP_MIN_DISKS", 0)
    monkeypatch.setattr(workspace, "HEAP_SLACK", 2)
    decided = []
    scan_heap = Workspace._scan_heap

    def counted(self: Workspace, *args: object) -> tuple[bool, int | None]:
        done, found = scan_heap(self, *args)  # type: ignore[arg-type]
        decided.append(done)
        return done, found

    monkeypatch.setattr(Workspace, "_scan_heap", counted)
    snap = generate_snapshot(replace(SPEC, seed=seed))
    ws = Workspace(snap)
    rng = random.Random(seed)
    third = len(ws.base) // 3
    ws.base[:third] = np.round(ws.base[:third], 1) - 0.05  # ties and negative projections
    ws.proj[:] = ws.base
    group = ws.group(snap.brokers[0].pool)
    parts = [p for p in snap.index.partitions if p.leader is not None]
    limit = float(ws.util_arr[group].mean()) * 1.07
    for _ in range(1500):
        p = rng.choice(parts)
        replicas, dirs = ws.replicas(p)
        position = rng.randrange(len(replicas))
        tries = rng.choice([1, 3, 64])
        heap = ws.best_target(p, position, group, max_util=limit, frequent=True, tries=tries)
        assert heap == ws.best_target(p, position, group, max_util=limit, tries=tries)
        target = heap if heap is not None and rng.random() < 0.8 else rng.choice(group.tolist())
        broker, path = ws.disk_ids[target]
        if (broker not in replicas or broker == replicas[position]) and (broker, path) != (replicas[position],
                                                                                           dirs[position]):
            ws.move_replica(p, position, target)
    assert sum(decided) > 1000


def test_shedding_heap_pushpop_gives_push_then_pop_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shedding run puts its source back with one ``heappushpop``: the plan separate push and pop give."""
    snap = generate_snapshot(replace(SPEC, brokers=40, partitions=4000))
    fast = plan_rebalance(snap)
    push, pop = heapq.heappush, heapq.heappop

    def push_then_pop(heap: list[tuple[float, int]], item: tuple[float, int]) -> tuple[float, int]:
        push(heap, item)
        return pop(heap)

    monkeypatch.setattr(heapq, "heappushpop", push_then_pop)
    assert fast.moves and dump_plan(plan_rebalance(snap)) == dump_plan(fast)


def test_add_load_in_python_floats_is_numpys_arithmetic() -> None:
    ws = Workspace(generate_snapshot(SPEC))
    rng = random.Random(5)
    for _ in range(300):
        i = rng.randrange(len(ws.disk_ids))
        delta = rng.choice([-1.0, 1.0]) * rng.random() * 10 ** rng.randint(0, 9)
        load = ws.load.copy()
        load[i] += delta
        ws.add_load(i, delta)
        util = load[i] * ws.inv_max[i]
        proj = ws.base[i] + (load[i] - ws.load0[i]) * ws.inv_max[i]
        assert (ws.load.tobytes(), ws.util_arr[i].tobytes(), ws.proj[i].tobytes()) == (
            load.tobytes(), util.tobytes(), proj.tobytes())


def _replica_set_ok_plain(topo: Topology, old: tuple[int, ...], new: tuple[int, ...], pool: str,
                          placement: dict[str, int] | None) -> bool:
    """Topology.replica_set_ok before its early exits (#20): every rule counted in full."""
    new_set = set(new)
    if len(old) != len(new) or len(new_set) != len(new):
        return False
    old_set = set(old)
    for b in new:
        if b not in old_set and topo.open_pool.get(b) != pool:
            return False
    if tuple(new) != tuple(old):
        outside_after = sum(1 for b in new if topo.pool.get(b) != pool)
        if outside_after and outside_after >= sum(1 for b in old if topo.pool.get(b) != pool):
            return False
    if new_set == old_set:
        return True
    if placement:
        after = placement_deficit(new, topo.place, placement)
        if after and after >= placement_deficit(old, topo.place, placement):
            return False
    return not rack_spread_broken(old, new, topo.place, topo.racks_in.get(pool, {}), placement)


def test_replica_set_ok_early_exits_give_the_plain_rules() -> None:
    """Random old/new sets over two pools, dead and unknown brokers, duplicates, placements: the same verdicts."""
    snap = generate_snapshot(replace(SPEC, pools={"a": 0.6, "b": 0.4}, dead_brokers=4, racks_per_idc=2))
    topo = Topology(snap)
    rng = random.Random(5)
    ids = [b.id for b in snap.brokers] + [10_001, 10_002]  # two unknown brokers
    verdicts = set()
    for _ in range(20_000):
        n = rng.randrange(1, 5)
        old = tuple(rng.choice(ids) for _ in range(n))
        new = list(old)
        for _ in range(rng.randrange(1, 3)):
            new[rng.randrange(n)] = rng.choice(ids)
        if rng.random() < 0.1:
            new.reverse()
        if rng.random() < 0.03:
            new.append(rng.choice(ids))
        pool = rng.choice(["a", "b", "c"])
        placement = rng.choice([None, {"idc-a": 1}, {"idc-a": 2, "idc-b": 1}, {"idc-b": 3}])
        want = _replica_set_ok_plain(topo, old, tuple(new), pool, placement)
        assert topo.replica_set_ok(old, tuple(new), pool, placement) == want, (old, new, pool, placement)
        verdicts.add(want)
    assert verdicts == {True, False}


def test_had_is_membership_of_the_original_pairs() -> None:
    p = Partition("t", 0, (1, 2, 1), 1, (1, 2, 1), ("/a", "/b", "/c"))  # a duplicate broker, as a bad snapshot may
    for b in (1, 2, 3):
        for d in ("/a", "/b", "/c", "/d"):
            assert workspace._had(p, b, d) == ((b, d) in tuple(zip(p.replicas, p.log_dirs, strict=True)))


def _candidates_plain(ws: Workspace, i: int, pool: str, arrived: tuple[tuple[str, int], ...]) -> list[object]:
    """disk_balance._candidates with its position found by the plain scan of (broker, dir) pairs."""
    here = ws.disk_ids[i]
    out = []
    for pid in dict.fromkeys((*ws.index.replicas_on_disk[here], *arrived)):
        p = ws.partition(pid)
        if p.leader is None or ws.index.topic_by_name[p.topic].pool != pool:
            continue
        replicas, dirs = ws.replicas(p)
        position = next((k for k, pair in enumerate(zip(replicas, dirs, strict=True)) if pair == here), -1)
        if position < 0:
            continue
        load = p.replica_load(here[0])
        if load <= 0 or (here[0] == p.leader and position != 0):
            continue
        out.append((-(load / p.size_bytes) if p.size_bytes else float("-inf"), pid, position, load))
    out.sort(key=lambda c: c[:2])
    return [(pid, position, load) for _, pid, position, load in out]


def _random_move(ws: Workspace, rng: random.Random, parts: list[Partition], own_share: float
                 ) -> tuple[Partition, int] | None:
    """A random legal replica move applied to ``ws`` (to one of the replica's own broker's disks with probability
    ``own_share``, else to any disk): ``(partition, target disk)``, or None when the draw was not legal."""
    p = rng.choice(parts)
    replicas, dirs = ws.replicas(p)
    position = rng.randrange(len(replicas))
    target = rng.choice(ws.broker_disks[replicas[position]]) if rng.random() < own_share \
        else rng.randrange(len(ws.disk_ids))
    broker = int(ws.disk_broker[target])
    if (broker in replicas and broker != replicas[position]) or target == ws.pos[(replicas[position],
                                                                                  dirs[position])]:
        return None
    ws.move_replica(p, position, target)
    return p, target


def test_candidates_find_the_replica_on_the_disk_as_the_plain_scan() -> None:
    """After a rebalance's worth of moves (intra-broker ones too, replicas moved in): the same candidate piles."""
    snap = generate_snapshot(SPEC)
    ws = Workspace(snap)
    rng = random.Random(11)
    parts = [p for p in snap.index.partitions if p.leader is not None]
    arrived: dict[int, list[tuple[str, int]]] = {}
    for _ in range(800):
        moved = _random_move(ws, rng, parts, 0.5)
        if moved is not None:
            arrived.setdefault(moved[1], []).append(moved[0].id)
    for i in range(len(ws.disk_ids)):
        got = [(c.pid, c.position, c.load) for c in disk_balance._candidates(ws, i, "shared", arrived.get(i, ()))]
        assert got == _candidates_plain(ws, i, "shared", tuple(arrived.get(i, ())))


def test_planned_leader_is_workspace_leader() -> None:
    """move_replica and added_load read the planned leader inline: Workspace.leader's answer, overrides too."""
    snap = generate_snapshot(SPEC)
    ws = Workspace(snap)
    rng = random.Random(13)
    parts = [p for p in snap.index.partitions if p.leader is not None]
    for step in range(1500):
        p = rng.choice(parts)
        replicas, dirs = ws.replicas(p)
        if step % 5 == 0:
            ws.set_leader(p, rng.choice(replicas))
        else:
            position = rng.randrange(len(replicas))
            target = rng.randrange(len(ws.disk_ids))
            broker = int(ws.disk_broker[target])
            if not (broker in replicas and broker != replicas[position]) \
                    and target != ws.pos[(replicas[position], dirs[position])]:
                ws.move_replica(p, position, target)
        replicas, dirs = ws.replicas(p)
        assert workspace._planned_leader(p, ws.leader_override.get(p.id), replicas, dirs) == ws.leader(p)
        for k in range(len(replicas)):
            src, add = ws.added_load(p, k)
            assert src == ws.pos.get((replicas[k], dirs[k]), -1)
            assert add == p.bytes_in_per_s + (p.disk_read_bytes_per_s if ws.leader(p) == replicas[k] else 0.0)


def test_summary_intra_broker_bytes_are_the_workspace_count() -> None:
    """The rebalance note takes its intra-broker bytes from the plan summary: the workspace's own count, also with
    replicas moved between log dirs, moved back, and across brokers."""
    snap = generate_snapshot(SPEC)
    ws = Workspace(snap)
    rng = random.Random(17)
    parts = [p for p in snap.index.partitions if p.leader is not None]
    for _ in range(900):
        _random_move(ws, rng, parts, 0.6)
    draft = Plan(cluster=snap.cluster, kind="rebalance", moves=ws.moves())  # (random moves: not a valid plan)
    summary = summarize_effect(snap, draft, plan_effect(snap, draft))
    assert ws.intra_broker_bytes() > 0
    assert summary.intra_broker_bytes == ws.intra_broker_bytes()


def test_best_own_target_is_best_target_over_own_disks() -> None:
    """The intra-broker scan on the broker's span answers as best_target over own_disks (limits, room, sources)."""
    snap = generate_snapshot(SPEC)
    ws = Workspace(snap)
    rng = random.Random(19)
    parts = [p for p in snap.index.partitions if p.leader is not None]
    answers = set()
    for step in range(3000):
        p = rng.choice(parts)
        replicas, dirs = ws.replicas(p)
        position = rng.randrange(len(replicas))
        i = ws.pos[(replicas[position], dirs[position])]
        added = ws.added_load(p, position)
        limit = rng.choice([None, 0.0, float(ws.util_arr[i]), float(ws.util_arr.mean()), 10.0])
        want = ws.best_target(p, position, ws.own_disks(i), max_util=limit, added=added)
        assert ws.best_own_target(i, p, position, max_util=limit, added=added) == want
        answers.add(want is None)
        if want is not None and step % 3 == 0:
            ws.move_replica(p, position, want)
    assert answers == {True, False}
