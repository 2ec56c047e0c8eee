"""Bytes per message of a partition nobody writes now: its log's size over its offsets (a lagging consumer
replaying it still gets a bytes-out share and a disk-read estimate)."""

from __future__ import annotations

import math

import numpy as np

from collectors.build.methods import stored_bytes_per_msg
from collectors.build.partition_rates import PartitionCounters

NAN = math.nan


def counters(size_lead: list[float], size_any: list[float], lso: list[float]) -> PartitionCounters:
    n = len(size_lead)
    none = np.full(n, np.nan)
    return PartitionCounters(leo_lead_rate=none, leo_lead_val=none, leo_any_rate=none, leo_any_val=none,
                             size_lead_rate=none, size_lead_val=np.array(size_lead), size_any_val=np.array(size_any),
                             sp_leo_rate={}, sp_leo_val={}, sp_size_rate={}, lso_lead_val=np.array(lso))


def test_stored_bytes_per_message_is_size_over_offsets_and_nan_when_unknown() -> None:
    pc = counters([65_600_000.0, NAN, 1000.0, NAN, 0.0], [NAN, 2000.0, NAN, NAN, NAN], [0.0, 10.0, 5.0, 0.0, 0.0])
    leo = np.array([1000.0, 30.0, 5.0, 100.0, 50.0])
    got = stored_bytes_per_msg(pc, leo)
    assert got[0] == 65_600.0  # the leader's size over LEO - log start
    assert got[1] == 100.0  # any replica's size when the leader's is not exported
    assert all(math.isnan(x) for x in got[2:])  # empty log, no size, size 0
