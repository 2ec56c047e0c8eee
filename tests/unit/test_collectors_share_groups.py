"""KIP-932 share groups in the collectors and in throttle protection's attribution: one reader per share group at
its SPSO (not one per member), LEO − SPSO as its lag, and every member assigned a partition as its clients."""

from __future__ import annotations

import numpy as np

from collectors.build.partition_rates import PartitionIndex
from collectors.build.reads import admin_positions
from collectors.build.share import ShareReader, position, share_readers, share_table
from collectors.build.state import GroupBook
from collectors.build.topology import Sources
from collectors.pagecache import position_disk_reads
from collectors.promtext import Payload
from collectors.rates import VectorCounterTracker
from controlplane.service.share_lineage import share_fetch_shares, with_share_members
from kafkaio.group_types import GroupOffsets, ShareGroup, ShareMember, SharePartitionOffset
from kafkaio.types import KafkaState
from planners.protection import ClientShare, Lineage

J0, J1 = ("jobs", 0), ("jobs", 1)


def workers(spso: int, members: int = 3, j1: int | None = None, lag: int | None = None) -> ShareGroup:
    ms = tuple(ShareMember(f"m{k}", f"worker-{k}", "h", None, 3, ("jobs",), (J0,) if k else (J0, J1))
               for k in range(members))
    offs = {J0: SharePartitionOffset("jobs", 0, spso, 0, lag), J1: SharePartitionOffset("jobs", 1, j1, 0, None)}
    return ShareGroup("workers", "Stable", 5, 5, "simple", ms, offs)


def test_share_readers_report_spso_position_lag_and_every_member_of_each_partition() -> None:
    pidx = {J0: 0, J1: 1}
    got = share_readers({"workers": workers(1500, lag=7)}, pidx, np.array([1520.0, np.nan]))
    (r0,), (r1,) = got[0], got[1]
    # the broker says 7 records are not delivery-complete: the position is 1513, past the persisted SPSO
    assert r0 == ShareReader("workers", 1500, 1513.0, 7.0, 7, ("worker-0", "worker-1", "worker-2"), 3)
    assert r1.start_offset is None and r1.lag is None and r1.members == ("worker-0",)  # no SPSO, no LEO: no lag
    no_lag = share_readers({"workers": workers(1500)}, pidx, np.array([1520.0, 0.0]))[0][0]
    assert (no_lag.position, no_lag.lag) == (1500.0, 20.0)  # v0 (no broker lag): LEO - SPSO
    assert share_readers({"workers": workers(1600)}, pidx, np.array([1520.0, 0.0]))[0][0].lag == 0.0  # never < 0
    assert share_readers({"workers": workers(1)}, {}, np.array([])) == {}  # partitions the metadata lacks


def test_the_position_is_where_records_stop_being_delivery_complete() -> None:
    assert position(1638, 0, 2000.0) == 2000.0  # persisted SPSO behind, everything acknowledged (seen on 4.2.0)
    assert position(2000, 3000, 5000.0) == 2000.0
    assert position(2000, 4000, 5000.0) == 2000.0  # never below the SPSO
    assert position(2000, None, 5000.0) == 2000.0 and position(2000, 5, float("nan")) == 2000.0
    assert position(None, 0, 10.0) is None
    assert position(10, -5, 100.0) == 100.0  # never past the log end
    tab = share_table({"workers": workers(1638, lag=0)}, {J0: 0}, np.array([2000.0]))
    assert tab.as_dict() == {"workers": {J0: 2000}}  # one row (3 members), J1 without SPSO: none


def test_a_share_group_of_three_members_is_one_position_and_one_disk_reader() -> None:
    ix = PartitionIndex([J0], {J0: 0}, [], np.array([1]), np.array([0]), {})
    tracker, book = VectorCounterTracker(0.5), GroupBook()

    def round_(clock: float, spso: int, tail: int) -> tuple[dict[str, float], dict[tuple[int, str], float]]:
        state = KafkaState(None, None, {}, {}, group_offsets=GroupOffsets.from_mapping({"tail": {J0: tail}}),
                           group_offsets_fresh=True, share_groups={"workers": workers(spso)})
        positions: dict[int, dict[str, float]] = {0: {}}
        rates: dict[tuple[int, str], float] = {}
        n = admin_positions(state, ix, np.array([100_000.0]), Sources({1: (Payload(), clock, "ts")}, []), tracker,
                            book, clock, 60.0, positions, rates)
        assert n == 2  # the consumer group's row and the share group's one row (not one per member)
        tracker.end_round()
        return positions[0], rates

    round_(1000.0, 10_000, 99_000)
    pos, rates = round_(1010.0, 12_000, 99_500)
    assert pos == {"tail": 99_500.0, "workers": 12_000.0}
    assert rates[(0, "workers")] == 200.0  # the SPSO's progress: the whole group's consumption
    # the position estimate: the share group reads the disk once, at its SPSO's rate; the tailing group is cached
    group_rates = {g: r for (_, g), r in rates.items()}
    est = position_disk_reads(100_000.0, 0.0, 250.0, 60.0, 1000.0, 250_000.0, pos, group_rates)
    assert est.disk == ["workers"] and est.cached == ["tail"]
    assert est.bytes_per_s == 200.0 * 1000.0


def reader(group: str, members: tuple[str, ...]) -> ShareReader:
    return ShareReader(group, 10, 10.0, 5.0, None, members, len(members))


def test_attribution_lists_every_member_each_with_its_part_of_the_groups_reads() -> None:
    share_read = {J0: (reader("workers", ("w-1", "w-2", "w-3")),), J1: (reader("idle", ()),)}
    readers = {J0: ["tail", "workers"]}  # a consumer group reads J0 too: the share group has half of its bytes
    got = share_fetch_shares(share_read, readers, {J0: 600.0, J1: 50.0})
    assert got == {J0: (ClientShare("w-1", 100.0), ClientShare("w-2", 100.0), ClientShare("w-3", 100.0))}
    assert sum(s.bytes_per_s for s in got[J0]) <= 600.0
    # two share groups and a member in both: its parts add up
    both = share_fetch_shares({J0: (reader("a", ("x", "y")), reader("b", ("x",)))}, {}, {J0: 400.0})
    assert both == {J0: (ClientShare("x", 300.0), ClientShare("y", 100.0))}


def test_audit_lineage_of_a_partition_wins_over_share_members() -> None:
    audited = Lineage(fetch={J1: (ClientShare("measured", 5.0),)})
    share_read = {J0: (reader("workers", ("w-1", "w-2")),), J1: (reader("workers", ("w-1",)),)}
    got = with_share_members(audited, share_read, {}, {J0: 10.0, J1: 10.0})
    assert got.fetch[J1] == (ClientShare("measured", 5.0),)
    assert [s.client_id for s in got.fetch[J0]] == ["w-1", "w-2"]
    assert with_share_members(audited, {J0: (reader("idle", ()),)}, {}, {J0: 1.0}) is audited
