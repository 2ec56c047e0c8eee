"""Load basis: which per-partition write rate the planners weigh — the last window or a modelled peak.

Planners read each partition's ``bytes_in_per_s`` from the snapshot (the last collection window). A
partition that is quiet now but peaks every evening looks cheap to the window; balancing on the
traffic model's next-day peak forecast instead places it where its peak fits. The planners stay
pure: this module only *rewrites the snapshot's partition rates* before planning and describes the
rewrite as a :class:`LoadBasis` the plan records, so applying the recorded overrides to the same
snapshot (:func:`apply_load_basis`) reproduces the planner's input exactly.

Only ``bytes_in_per_s`` (what every replica writes) is replaced; ``disk_read_bytes_per_s`` (page-cache
misses of the leader) stays the window's: the audit-based model has no view of the page cache.
Partitions the model does not know keep their window rate. Deterministic; O(partitions).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from domain import ClusterSnapshot, LoadBasis, LoadOverride, PartitionId
from planners.workspace import PlannerError

WINDOW = "window"
MODELLED_PEAK = "modelled_peak"
LOAD_BASES = (WINDOW, MODELLED_PEAK)


@dataclass(frozen=True, slots=True)
class ModelledLoad:
    """A traffic model's expected peak write rate per partition (bytes/s) and where it came from."""

    source: str
    bytes_in: Mapping[PartitionId, float]


def with_modelled_peaks(snapshot: ClusterSnapshot, model: ModelledLoad) -> tuple[ClusterSnapshot, LoadBasis]:
    """``snapshot`` with every partition the model knows at its modelled peak write rate, and the record
    of what changed (partitions in snapshot order; non-finite or negative model values are ignored)."""
    overrides = []
    for p in snapshot.iter_partitions():
        peak = model.bytes_in.get(p.id)
        if peak is None or not math.isfinite(peak) or peak < 0 or peak == p.bytes_in_per_s:
            continue
        overrides.append(LoadOverride(p.topic, p.partition, p.bytes_in_per_s, float(peak)))
    basis = LoadBasis(basis=MODELLED_PEAK, source=model.source, overrides=tuple(overrides))
    return apply_load_basis(snapshot, basis), basis


def apply_load_basis(snapshot: ClusterSnapshot, basis: LoadBasis) -> ClusterSnapshot:
    """``snapshot`` with the recorded overrides applied; :class:`PlannerError` when an override names a
    partition the snapshot does not have (the plan was made on another topology)."""
    if basis.basis not in LOAD_BASES:
        raise PlannerError(f"unknown load basis {basis.basis!r}; known: {', '.join(LOAD_BASES)}")
    if not basis.overrides:
        return snapshot
    rates: dict[PartitionId, float] = {}
    index = snapshot.index.partition_by_id
    for o in basis.overrides:
        if (o.topic, o.partition) not in index:
            raise PlannerError(f"load basis names partition {o.topic}-{o.partition}, not in the snapshot")
        rates[(o.topic, o.partition)] = o.bytes_in_per_s
    topics = []
    for t in snapshot.topics:
        if not any((t.name, p.partition) in rates for p in t.partitions):
            topics.append(t)
            continue
        parts = tuple(replace(p, bytes_in_per_s=rates[p.id]) if p.id in rates else p for p in t.partitions)
        topics.append(replace(t, partitions=parts))
    return replace(snapshot, topics=tuple(topics))


def describe(basis: LoadBasis) -> str:
    """One line for the plan's notes."""
    if basis.basis == WINDOW:
        return "load basis: window (per-partition rates as last collected)"
    before = sum(o.window_bytes_in_per_s for o in basis.overrides)
    after = sum(o.bytes_in_per_s for o in basis.overrides)
    return (f"load basis: modelled_peak from {basis.source or 'a traffic model'}: {len(basis.overrides)} partition "
            f"rates replaced ({before:.0f} B/s in the window -> {after:.0f} B/s at the modelled peak)")
