"""Property: the joint throttle choice never puts any resource of its model over budget, as Kafka shares the rates."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.disk_rates import DiskRate
from controlplane.executor.migration_rate import CopyFlow, fill_to_level, resources
from controlplane.executor.migration_sides import choose, realized, roles_on

BROKERS = (1, 2, 3, 4)
DIRS = ("/d1", "/d2")
flow_spec = st.tuples(st.sampled_from(BROKERS), st.sampled_from(DIRS), st.sampled_from(BROKERS),
                      st.sampled_from((*DIRS, None)), st.floats(1e6, 20e9), st.booleans())


@settings(max_examples=150, deadline=None)
@given(st.lists(flow_spec, min_size=1, max_size=14),
       st.dictionaries(st.tuples(st.sampled_from(BROKERS), st.sampled_from(DIRS)), st.floats(0.0, 0.95),
                       min_size=8, max_size=8),
       st.dictionaries(st.tuples(st.sampled_from(BROKERS), st.sampled_from(DIRS)), st.floats(0.0, 50e9)),
       st.floats(0.4, 0.9), st.sampled_from([None, 5.0]), st.floats(20e6, 400e6))
def test_no_resource_exceeds_its_budget_and_every_copy_is_throttled(
        specs: list[tuple[int, str, int, str | None, float, bool]], utils: dict[tuple[int, str], float],
        work: dict[tuple[int, str], float], threshold: float, horizon: float | None, ceiling: float) -> None:
    disks = {d: DiskRate(util=u, bytes_per_s=u * 200e6, max_bytes_per_s=200e6) for d, u in utils.items()}
    flows = []
    for i, (src, sd, dst, dd, left, intra) in enumerate(specs):
        if intra or src == dst:
            other = "/d2" if sd == "/d1" else "/d1"
            flows.append(CopyFlow(f"t:{i}>{src}", "future", src, src, (src, sd), (src, other), remaining_bytes=left))
        else:
            flows.append(CopyFlow(f"t:{i}>{dst}", "move", src, dst, (src, sd), (dst, dd) if dd else None,
                              remaining_bytes=left, tp=("t", i)))
    res = resources(flows, disks, threshold)
    c = choose(flows, res, work, ceiling, horizon_s=horizon)
    got = realized(flows, c.sides, c.rates)
    for r_ in res:
        load = sum(got[flows[i].key] for i, _ in r_.members)
        assert load <= r_.budget * (1 + 1e-6) + 1.0, (r_.name, load, r_.budget)
    for f in flows:
        assert roles_on(f, c.sides[f.key]) and all(r in c.rates for r in roles_on(f, c.sides[f.key]))
        assert got[f.key] <= ceiling * (1 + 1e-9)
    assert all(rate >= 0 for rate in c.rates.values())


@given(st.lists(st.tuples(st.floats(0, 1e11), st.floats(1e6, 5e8)), min_size=1, max_size=12),
       st.floats(0, 1e11))
def test_filling_to_a_level_keeps_the_bytes_and_levels_the_disks_that_get_some(
        disks: list[tuple[float, float]], amount: float) -> None:
    load = {(1, f"/d{i}"): w for i, (w, _) in enumerate(disks)}
    cap = {(1, f"/d{i}"): c for i, (_, c) in enumerate(disks)}
    got = fill_to_level(load, cap, amount)
    assert math.isclose(sum(got.values()), amount, rel_tol=1e-9, abs_tol=1.0)
    assert all(x >= -1e-3 for x in got.values())
    levels = [(load[d] + x) / cap[d] for d, x in got.items()]
    if levels:
        top = max(levels)
        assert max(levels) - min(levels) <= 1e-9 * max(top, 1.0)
        assert all(load[d] / cap[d] >= top * (1 - 1e-9) for d in load if d not in got)  # none left below it
