"""Throttle protection's knobs: the per-disk-kind health marks and the protection's rates and factors.

Goal: one place for every threshold the protection pipeline reads (:mod:`planners.protection`).
Method: frozen dataclasses validated on construction; the service builds them from ``[throttle]`` of the
config file. Guarantee: a config that exists is consistent (low marks below high marks, counts >= 1).
Cost: constant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from domain.model import DiskKind

WHO = "throttle-protection"
"""The ``set_by`` of the protection's throttles in the replicated state."""


# --------------------------------------------------------------------------- configuration
@dataclass(frozen=True, slots=True)
class HealthThresholds:
    """High/low marks of one disk kind; ``enter_samples`` is the k of the hysteresis."""

    util_high: float = 0.85
    util_low: float = 0.70
    await_high_ms: float = 50.0
    await_low_ms: float = 20.0
    enter_samples: int = 2
    leave_samples: int = 2

    def __post_init__(self) -> None:
        if not (0 < self.util_low < self.util_high and 0 < self.await_low_ms < self.await_high_ms):
            raise ValueError("thresholds need 0 < low < high for util and await")
        if self.enter_samples < 1 or self.leave_samples < 1:
            raise ValueError("enter_samples and leave_samples must be >= 1")


DEFAULT_THRESHOLDS: Mapping[DiskKind, HealthThresholds] = {
    DiskKind.HDD: HealthThresholds(0.85, 0.70, 60.0, 25.0),
    DiskKind.SSD: HealthThresholds(0.85, 0.70, 10.0, 4.0),
    DiskKind.NVME: HealthThresholds(0.85, 0.70, 3.0, 1.0),
}


@dataclass(frozen=True, slots=True)
class ProtectionConfig:
    """Knobs of the protection (all rates in bytes/s)."""

    thresholds: Mapping[DiskKind, HealthThresholds] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))
    target_util: float = 0.65
    write_tolerance: float = 1.5
    """A user write is abnormal above ``expected x write_tolerance``."""
    min_abnormal_bytes_per_s: float = 256 * 1024
    """Flows smaller than this are noise, never queued."""
    min_rate_bytes_per_s: float = 512 * 1024
    """No lever is set below this (a throttle never stops a client or a copy entirely)."""
    isr_floor_bytes_per_s: float = 1024 * 1024
    catch_up_margin: float = 0.2
    """A follower catch-up throttle keeps at least ``bytes_in x (1 + margin)`` so the replica still gains."""
    relax_factor: float = 2.0
    release_unbound_ratio: float = 0.8
    """Release when the lever carries less than this fraction of its rate (it no longer binds)."""
    max_queue_evidence: int = 10
    quota_quiet_samples: int = 10
    """A client quota whose flow vanished is released only after this many consecutive quiet evaluations: Kafka
    mutes a throttled client for up to its quota window (11 s by default) and again while its average stays
    over the quota — on the lab, 12 s of silence after a quota cut from 2.2 to 0.5 MB/s — so a shorter silence
    is the quota working, not the cause gone."""

    def thresholds_for(self, kind: DiskKind) -> HealthThresholds:
        """The thresholds of ``kind`` (HDD's when the kind is not configured)."""
        return self.thresholds.get(kind) or self.thresholds.get(DiskKind.HDD) or HealthThresholds()
