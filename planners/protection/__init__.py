"""Partition-level throttle protection: snapshot + history -> throttle decisions (pure, deterministic).

The pipeline, per disk (log dir), one pass per collection interval:

1. **Health** (:func:`step_health`): util and await against the thresholds of the disk's kind, with
   hysteresis — a disk *enters* the unhealthy state after ``enter_samples`` consecutive samples above
   the high mark (either metric) and *leaves* it after ``leave_samples`` consecutive samples below the
   low marks (both metrics). Missing or non-finite samples change nothing (no entering, no leaving).
   A firing on-call alert for the disk counts as "above the high mark" at once.
2. **Root cause** (:func:`disk_flows`): the disk's I/O split into the six behaviours (user read/write,
   replication read/write, migration read/write) per partition, from the snapshot (``bytes_in_per_s``
   on every in-sync replica, ``disk_read_bytes_per_s`` = the page-cache-miss estimate on the leader)
   plus the in-flight :class:`Transfer` s (reassignment and intra-broker copies, follower catch-up).
3. **Abnormal behaviour queue** (:func:`abnormal_queue`): writes above the partition's expected rate
   (history / traffic model; copies and catch-up are always above the steady-state expectation) and
   every disk read, sorted by current traffic, largest first (ties by a stable key).
4. **Action** (:func:`plan_throttles`): walk the queue from the top, cutting each entry only as much as
   needed, until the predicted util is under ``target_util``; the mechanism depends on the behaviour
   and on the cluster's capability (see :class:`NamedLever`). In-sync replication is never throttled and a
   follower catch-up throttle never goes below ``max(isr_floor, bytes_in x (1 + margin))``.
5. **Relaxation**: on a healthy disk each protection throttle is released once its cause is gone (its
   flow vanished or it no longer binds), else raised by ``relax_factor`` per interval while the
   predicted util stays below the low mark (hysteresis), and released when it reaches its original rate.
   A client quota is released for a vanished flow only after ``quota_quiet_samples`` quiet evaluations in a
   row (the caller counts them), and relaxed only while ``max(util, its rate / the disk's ceiling)`` plus the
   step stays under the low mark: Kafka enforces a quota by muting the client for its throttle time, so its
   flow vanishes between bursts while the client still lags (seen on real Kafka: releasing or relaxing on
   such a sample let the consumer drive the disk back to util 1 within seconds).

Complexity: O(replicas + transfers) to index flows, O(q log q) per unhealthy disk with q flows on it.
Everything here is plain data; nothing reads a clock or does I/O.

One module per step, along the pipeline: :mod:`.config` (knobs), :mod:`.health` (1), :mod:`.inputs` (what an
evaluation consumes besides the snapshot, :class:`Observation` included), :mod:`.flows` (2), :mod:`.queue` (3),
:mod:`.levers` (4 and 5). This package re-exports their public names.
"""

from planners.protection.config import DEFAULT_THRESHOLDS, WHO, HealthThresholds, ProtectionConfig
from planners.protection.flows import BEHAVIOURS, Behaviour, DiskFlow, disk_flows
from planners.protection.health import DiskHealth, step_health
from planners.protection.inputs import (
    ActiveThrottle,
    AssignedClient,
    ClientShare,
    Lineage,
    Observation,
    ProtectionInput,
    Transfer,
    parse_active,
)
from planners.protection.levers import (
    NO_PARTITION_THROTTLE,
    DiskReport,
    NamedLever,
    ProtectionPlan,
    ThrottleDecision,
    plan_throttles,
)
from planners.protection.queue import QueueEntry, abnormal_queue

__all__ = ["BEHAVIOURS", "DEFAULT_THRESHOLDS", "NO_PARTITION_THROTTLE", "WHO", "ActiveThrottle", "AssignedClient",
           "Behaviour", "ClientShare", "DiskFlow", "DiskHealth", "DiskReport", "HealthThresholds", "Lineage",
           "NamedLever", "Observation", "ProtectionConfig", "ProtectionInput", "ProtectionPlan", "QueueEntry",
           "ThrottleDecision", "Transfer", "abnormal_queue", "disk_flows", "parse_active", "plan_throttles",
           "step_health"]
