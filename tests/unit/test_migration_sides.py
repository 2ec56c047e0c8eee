"""The joint throttle choice: the LP, the side a copy is throttled on, the rates, and their wiring into the sync."""

from __future__ import annotations

import numpy as np
import pytest

from collectors.disk_rates import DiskRate
from controlplane.executor.copy_meter import CopyMeter
from controlplane.executor.migration_levers import MigrationLevers
from controlplane.executor.migration_rate import CopyFlow, MigrationRatePolicy, PendingWork, broker_rates, resources
from controlplane.executor.migration_sides import (
    BOTH,
    DIRS,
    FOLLOWER,
    LEADER,
    choose,
    maximize,
    realized,
    roles_on,
)
from controlplane.state.store import LocalStateStore
from domain.throttles import FOLLOWER_RATE, FOLLOWER_REPLICAS, LEADER_RATE, LEADER_REPLICAS


def disk(util: float) -> DiskRate:
    return DiskRate(util=util, bytes_per_s=util * 200e6, max_bytes_per_s=200e6)


def loads(flows: list[CopyFlow], rates: dict[str, float], disks: dict[tuple[int, str], DiskRate]
          ) -> dict[tuple[int, str], float]:
    out = {d: 0.0 for d in disks}
    for f in flows:
        for d in {f.src_disk, f.dst_disk}:
            if d is not None:
                out[d] += rates[f.key]
    return out


def test_the_simplex_finds_the_optimum_of_a_small_lp() -> None:
    y = maximize(np.array([3.0, 2.0]), np.array([[1.0, 1.0], [1.0, 3.0], [1.0, 0.0]]), np.array([4.0, 6.0, 3.0]))
    assert y == pytest.approx([3.0, 1.0])
    degenerate = maximize(np.array([1.0, 1.0]), np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]),
                          np.array([0.0, 2.0, 2.0]))
    assert degenerate == pytest.approx([0.0, 2.0])


# broker 2 takes two copies: one onto a nearly full disk, one onto an idle disk. On both sides they share
# broker 2's follower rate equally, so the idle disk's copy is held to the full disk's share.
DISKS = {(1, "/a"): disk(0.30), (3, "/c"): disk(0.30), (2, "/full"): disk(0.60), (2, "/idle"): disk(0.10)}
FLOWS = [CopyFlow("t:0>2", "move", 1, 2, (1, "/a"), (2, "/full"), remaining_bytes=5e9, tp=("t", 0)),
         CopyFlow("t:1>2", "move", 3, 2, (3, "/c"), (2, "/idle"), remaining_bytes=5e9, tp=("t", 1))]


def test_a_copy_on_its_own_side_escapes_the_share_of_a_neighbour_held_back_by_a_full_disk() -> None:
    policy = MigrationRatePolicy(util_threshold=0.7, headroom=0.0, gain=1.0, choice="fair")
    fair = broker_rates(FLOWS, DISKS, policy, {}, 0.0)
    both = realized(FLOWS, {f.key: BOTH for f in FLOWS}, fair)
    assert both["t:0>2"] == pytest.approx(20e6) and both["t:1>2"] == pytest.approx(20e6)  # coupled
    res = resources(FLOWS, DISKS, 0.7)
    c = choose(FLOWS, res, {}, 400e6)
    got = realized(FLOWS, c.sides, c.rates)
    assert c.sides["t:0>2"] != c.sides["t:1>2"]
    assert got["t:0>2"] == pytest.approx(20e6, rel=1e-6)
    assert got["t:1>2"] == pytest.approx(80e6, rel=1e-6)  # (0.7 - 0.3) x 200 MB/s of its source
    for d, load in loads(FLOWS, got, DISKS).items():
        assert load <= (0.7 - DISKS[d].util) * 200e6 * (1 + 1e-9)


def test_the_copies_of_the_disk_that_bounds_the_execution_come_first() -> None:
    # two copies read one source disk with 60 MB/s to spare; the first also writes the disk with the most work
    disks = {(1, "/s"): disk(0.40), (2, "/hot"): disk(0.40), (3, "/cold"): disk(0.40)}
    flows = [CopyFlow("t:0>2", "move", 1, 2, (1, "/s"), (2, "/hot"), remaining_bytes=1e9, tp=("t", 0)),
             CopyFlow("t:1>3", "move", 1, 3, (1, "/s"), (3, "/cold"), remaining_bytes=1e9, tp=("t", 1))]
    work = {(1, "/s"): 2e9, (2, "/hot"): 20e9, (3, "/cold"): 1e9}
    c = choose(flows, resources(flows, disks, 0.7), work, 400e6)
    got = realized(flows, c.sides, c.rates)
    assert got["t:0>2"] == pytest.approx(60e6, rel=1e-6) and got["t:1>3"] < 1e6


def test_the_copies_of_one_task_are_not_starved_for_a_sibling_on_a_busier_disk() -> None:
    # the rolling-release drain: each task adds two replicas read from one source disk (60 MB/s to spare), one
    # onto broker 6 (much work left), one onto broker 5. Kafka reports the task's progress as a whole, so both
    # copies show the same remaining bytes; the task ends with its slower copy. Weighing copies one by one, the
    # LP gave broker 6's copies all of the source disk and broker 5's none (they crawled at the floor rate,
    # just above their ingress, while broker 6's copies had long finished and the disks stood idle).
    disks = {(7, "/s"): disk(0.40), (6, "/a"): disk(0.10), (6, "/b"): disk(0.10),
             (5, "/a"): disk(0.10), (5, "/b"): disk(0.10)}
    flows = [CopyFlow(f"t:{p}>{b}", "move", 7, b, (7, "/s"), (b, d), remaining_bytes=28e6, ingress_bytes_per_s=120e3,
                  tp=("t", p)) for p, d in ((0, "/a"), (1, "/b")) for b in (6, 5)]
    work = {(7, "/s"): 112e6, (6, "/a"): 220e6, (6, "/b"): 220e6, (5, "/a"): 110e6, (5, "/b"): 110e6}
    c = choose(flows, resources(flows, disks, 0.7), work, 400e6)
    got = realized(flows, c.sides, c.rates)
    for p in (0, 1):  # every task runs at the source disk's equal share, both its copies alike
        assert got[f"t:{p}>5"] == pytest.approx(15e6, rel=1e-6) and got[f"t:{p}>6"] == pytest.approx(15e6, rel=1e-6)
    assert sum(got.values()) <= 60e6 * (1 + 1e-9)


def test_every_copy_is_throttled_forced_sides_hold_and_intra_broker_copies_use_the_dirs_rate() -> None:
    flows = [*FLOWS, CopyFlow("t:2>2", "future", 2, 2, (2, "/full"), (2, "/idle"), remaining_bytes=1e9, tp=("t", 2))]
    c = choose(flows, resources(flows, DISKS, 0.7), {}, 400e6, forced={"t:0>2": BOTH})
    assert c.sides["t:0>2"] == BOTH and c.sides["t:2>2"] == DIRS
    got = realized(flows, c.sides, c.rates)
    assert all(np.isfinite(list(got.values())))
    assert all(r in c.rates for f in flows for r in roles_on(f, c.sides[f.key]))


def test_a_copy_left_alone_when_its_neighbour_finishes_still_fits() -> None:
    # both copies on broker 2's follower side (their sources are forced to it); one ends before the next pass
    disks = {(1, "/a"): disk(0.1), (3, "/c"): disk(0.1), (2, "/x"): disk(0.1), (2, "/y"): disk(0.6)}
    flows = [CopyFlow("t:0>2", "move", 1, 2, (1, "/a"), (2, "/x"), remaining_bytes=10e6, tp=("t", 0)),
             CopyFlow("t:1>2", "move", 3, 2, (3, "/c"), (2, "/y"), remaining_bytes=5e9, tp=("t", 1))]
    forced = {f.key: FOLLOWER for f in flows}
    res = resources(flows, disks, 0.7)
    blind = choose(flows, res, {}, 400e6, forced=forced)
    assert blind.rates[(2, FOLLOWER_RATE)] == pytest.approx(40e6)  # 20 MB/s each: /y's budget
    c = choose(flows, res, {}, 400e6, forced=forced, horizon_s=5.0)
    alone = c.rates[(2, FOLLOWER_RATE)]  # what t:1>2 gets once t:0>2 is done
    assert alone <= 20e6 * (1 + 1e-9)


def test_copies_that_all_end_before_the_next_pass_keep_their_group_rate() -> None:
    # six copies share broker 1's leader rate and all end before the next pass: however they end one after the
    # other, the survivors never carry more than the whole rate, so the source disk's budget bounds the rate
    # itself (counting every survivor at the whole rate held them to a sixth of it)
    disks = {(1, "/s"): disk(0.1), **{(b, "/d"): disk(0.1) for b in range(2, 8)}}
    flows = [CopyFlow(f"t:{b}>{b}", "move", 1, b, (1, "/s"), (b, "/d"), remaining_bytes=10e6, tp=("t", b))
             for b in range(2, 8)]
    c = choose(flows, resources(flows, disks, 0.7), {}, 400e6, forced={f.key: LEADER for f in flows}, horizon_s=5.0)
    assert c.rates[(1, LEADER_RATE)] == pytest.approx(120e6, rel=1e-6)  # (0.7 - 0.1) x 200 MB/s


def test_the_catch_up_floor_is_spent_inside_the_disk_budget_not_on_top_of_it() -> None:
    # two copies read one source disk with 60 MB/s to spare; the first writes the disk with the most work, the
    # second a quiet one, and its partition takes 10 MB/s of produce. The LP gives the bounding copy the rest of
    # the budget and the other its catch-up floor (10 x 1.2 MB/s); before, it gave the first all 60 MB/s and
    # the floor was added on top (72 MB/s on a 60 MB/s budget: util over the threshold)
    disks = {(1, "/s"): disk(0.40), (2, "/hot"): disk(0.40), (3, "/cold"): disk(0.40)}
    flows = [CopyFlow("t:0>2", "move", 1, 2, (1, "/s"), (2, "/hot"), remaining_bytes=1e9, tp=("t", 0)),
             CopyFlow("t:1>3", "move", 1, 3, (1, "/s"), (3, "/cold"), remaining_bytes=1e9, ingress_bytes_per_s=10e6,
                  tp=("t", 1))]
    work = {(1, "/s"): 2e9, (2, "/hot"): 20e9, (3, "/cold"): 1e9}
    c = choose(flows, resources(flows, disks, 0.7), work, 400e6, floor=1e6)
    got = realized(flows, c.sides, c.rates)
    assert got["t:1>3"] == pytest.approx(12e6, rel=1e-6)
    assert got["t:0>2"] == pytest.approx(48e6, rel=1e-6)
    policy = MigrationRatePolicy(util_threshold=0.7, headroom=0.0, gain=1.0, floor=1e6, choice="joint")
    throttles = MigrationLevers(LocalStateStore(), None, "c1", policy, CopyMeter(), lambda *a, **k: None)  # type: ignore[arg-type]
    lists = {"t": {LEADER_REPLICAS: {"0:1", "1:1"}, FOLLOWER_REPLICAS: {"0:2", "1:3"}}}
    rates, cut = throttles.rates(flows, None, disks, None, lists, PendingWork(work))
    sides = {f.key: FOLLOWER if f"{f.tp[1]}:{f.dst_broker}" in cut["t"][FOLLOWER_REPLICAS] else LEADER
             for f in flows if f.tp is not None}
    assert sum(realized(flows, sides, rates).values()) <= 60e6 * (1 + 1e-6)  # the source disk's budget, floors in


def test_a_finishing_copy_that_outlives_a_neighbours_gain_still_counts() -> None:
    # disk 5:/s is read by L (listed on broker 2's follower side with two copies that end at once) and by M (alone on
    # broker 5's leader side, ending a few seconds into the pass). L takes broker 2's whole follower rate as soon as
    # its neighbours end, while M still runs: both must fit 5:/s (leaving M out spiked util to 0.86 in the bench)
    disks = {(5, "/s"): disk(0.30), (4, "/s"): disk(0.10), (2, "/a"): disk(0.10), (2, "/b"): disk(0.10)}
    flows = [CopyFlow("t:0>2", "move", 4, 2, (4, "/s"), (2, "/a"), remaining_bytes=1e3, tp=("t", 0)),
             CopyFlow("t:1>2", "move", 4, 2, (4, "/s"), (2, "/a"), remaining_bytes=1e3, tp=("t", 1)),
             CopyFlow("t:2>2", "move", 5, 2, (5, "/s"), (2, "/b"), remaining_bytes=5e9, tp=("t", 2)),
             CopyFlow("t:3>2", "move", 5, 2, (5, "/s"), (2, "/b"), remaining_bytes=60e6, tp=("t", 3))]
    forced = {"t:0>2": FOLLOWER, "t:1>2": FOLLOWER, "t:2>2": FOLLOWER, "t:3>2": LEADER}
    c = choose(flows, resources(flows, disks, 0.7), {}, 400e6, forced=forced, horizon_s=5.0)
    planned = realized(flows, c.sides, c.rates)
    assert planned["t:3>2"] * 5.0 >= 60e6 > planned["t:3>2"] * 1e-3  # M ends within the pass, not at once
    assert c.rates[(2, FOLLOWER_RATE)] + c.rates[(5, LEADER_RATE)] <= 80e6 * (1 + 1e-6)  # (0.7 - 0.3) x 200 MB/s


def test_the_sync_cuts_the_lists_to_the_chosen_sides_and_backs_up_every_replica_that_may_lead() -> None:
    policy = MigrationRatePolicy(util_threshold=0.7, headroom=0.0, gain=1.0, floor=1e6, choice="joint")
    throttles = MigrationLevers(LocalStateStore(), None, "c1", policy, CopyMeter(), lambda *a, **k: None)  # type: ignore[arg-type]
    lists = {"t": {LEADER_REPLICAS: {"0:1", "0:4", "1:3"}, FOLLOWER_REPLICAS: {"0:2", "1:2"}}}
    rates, cut = throttles.rates(FLOWS, None, DISKS, None, lists, PendingWork())
    # the idle disk's copy leaves broker 2's follower rate to the other one: listed on its leader's side only
    assert cut["t"][FOLLOWER_REPLICAS] == {"0:2"} and cut["t"][LEADER_REPLICAS] == {"1:3"}
    assert set(rates) == {(2, FOLLOWER_RATE), (3, LEADER_RATE)}
    lists = {"t": {LEADER_REPLICAS: {"0:1", "1:3", "1:4"}, FOLLOWER_REPLICAS: {"0:2", "1:2"}}}
    rates, cut = throttles.rates(FLOWS, None, DISKS, None, lists, PendingWork())
    assert cut["t"][LEADER_REPLICAS] == {"1:3", "1:4"}  # broker 4 may take over leadership of t-1 ...
    assert rates[(4, LEADER_RATE)] >= 1e6  # ... and then throttles it too
    fair = MigrationLevers(LocalStateStore(), None, "c1", MigrationRatePolicy(choice="fair"), CopyMeter(),  # type: ignore[arg-type]
                              lambda *a, **k: None)
    assert fair.rates(FLOWS, None, DISKS, None, lists, PendingWork())[1] == lists  # the old choice: both sides


def test_policy_rejects_an_unknown_choice() -> None:
    with pytest.raises(ValueError, match="joint or fair"):
        MigrationRatePolicy(choice="greedy")
