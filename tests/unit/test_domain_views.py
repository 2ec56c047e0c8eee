"""Derived views: disk load exactly as DESIGN.md defines it, and aggregates."""

from __future__ import annotations

import pytest

from domain import parse_snapshot
from tests.support.snapshots import dumps, small_doc


def test_disk_load_is_bytes_in_of_every_replica_plus_leader_reads() -> None:
    index = parse_snapshot(dumps(small_doc())).index
    # orders-0: replicas 1,2,4 on /data1, bytes_in 10e6, leader 1 reads 5e6 from disk
    # orders-1: replicas 2:/data1, 1:/data2, 4:/data2, bytes_in 2e6, leader 2 (no disk reads)
    assert index.disk_load[(1, "/data1")] == pytest.approx(15e6)
    assert index.disk_load[(1, "/data2")] == pytest.approx(2e6)
    assert index.disk_load[(2, "/data1")] == pytest.approx(12e6)
    assert index.disk_load[(4, "/data1")] == pytest.approx(10e6)
    assert index.disk_load[(4, "/data2")] == pytest.approx(2e6)
    assert index.disk_load[(3, "/data1")] == 0.0
    assert index.disk_util_estimate((1, "/data1")) == pytest.approx(0.15)


def test_replicas_on_disk_and_assigned_bytes() -> None:
    index = parse_snapshot(dumps(small_doc())).index
    assert index.replicas_on_disk[(2, "/data1")] == (("orders", 0), ("orders", 1))
    assert index.replicas_on_disk[(3, "/data2")] == ()
    assert index.assigned_bytes[(2, "/data1")] == 2 * 2**30


def test_broker_idc_and_pool_aggregates() -> None:
    index = parse_snapshot(dumps(small_doc())).index
    b1 = index.broker_load[1]
    assert (b1.replicas, b1.leaders) == (2, 1)
    assert b1.leader_bytes_in_per_s == pytest.approx(10e6)
    assert b1.bytes_out_per_s == pytest.approx(20e6)
    assert b1.disk_load_bytes_per_s == pytest.approx(17e6)
    idc = index.idc_load()
    assert list(idc) == ["idc-a", "idc-b"]
    assert idc["idc-a"].brokers == 3 and idc["idc-a"].replicas == 4
    assert idc["idc-b"].replicas == 3
    pools = index.pool_load()
    assert pools["pay"].brokers == 1 and pools["pay"].bytes_in_per_s == pytest.approx(3e6)
    # orders: 3 replicas x 10e6 + leader reads 5e6 + 3 x 2e6 = 41e6 over 5 brokers x 2 disks x 100e6
    assert pools["shared"].mean_util == pytest.approx(41e6 / (5 * 2 * 100e6))


def test_index_is_built_once() -> None:
    snap = parse_snapshot(dumps(small_doc()))
    assert snap.index is snap.index
