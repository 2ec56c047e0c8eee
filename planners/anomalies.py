"""Anomaly detectors: a cluster's recent rounds in, findings with their evidence out.

Goal: tell an operator (and the self-healing loop) what is broken — a dead broker, a failed log dir, a
fail-slow disk, under-replicated / under-min-ISR / offline partitions, a reassignment that stopped moving,
a broker that metadata lists but that does not answer admin requests — and whether a fix is allowed now.

Method: each detector is a pure function over a short history of :class:`HealthRound` (oldest first, the
newest last). Persistence is read from the history itself, so the detectors keep no state between calls:

* **broker failure** — a broker ``DEAD`` in the newest round (the collectors mark a broker known before but
  missing from metadata so) that still hosts replicas; ``dead_for_s`` runs from the first round of the
  unbroken dead streak, and the finding is *confirmed* once that exceeds the grace period. None while the
  broker is in maintenance.
* **log-dir failure** — a dir the round lists as offline (DescribeLogDirs ``KAFKA_STORAGE_ERROR``, with
  Metadata's offline replicas of the broker) on a broker that lives; confirmed while replicas are on it.
* **fail-slow disk** — judged per round against the await *expected at its load*: each disk's idle latency
  ``await x (1 - util)`` (M/M/1: await = service / (1 - util), so load alone does not change it) is compared
  with its peers' (same disk kind, median); slow when ``slow_await_factor`` x theirs and above
  ``slow_min_await_ms``. A disk slow against its peers is also checked against *its own history* (its idle
  latency in healthy rounds before the streak): as slow as it always was is a model, not a failure. A disk
  busy with Guardian's own copies (``own_copy_share`` of its load, util ``own_copy_util``+; the round's copies
  in flight per disk) is not judged, nor a saturated one carrying copies (queueing rules its await); a
  saturated one without copies is judged by its service time (util per byte/s) against its peers'. A disk that
  serves at least ``ceiling_share`` of its declared ``max_bytes_per_s`` per unit of util is busy, not slow,
  whatever its await (a disk held at its ceiling by a replaying consumer queues for seconds). Rounds
  that cannot judge a disk neither start nor end a slow streak, so an open anomaly stays open while its disk
  is slow; confirmed after ``slow_rounds`` slow rounds. The evidence carries ``slow_since`` (the round clock
  the streak began) and the figures; a slow disk that holds no replica stays a warning.
  :func:`disk_judged_healthy` says when the slowness is gone (judged healthy ``slow_rounds`` times running).
* **partitions** — under-replicated (a replica out of the ISR), under-min-ISR, offline (no leader). A partition
  whose only replicas out of the ISR are the ones a move adds (still copying) is not under-replicated: it
  was fully replicated before the move and stays so until the move completes.
* **stuck reassignment** — a partition in flight for ``stuck_rounds`` rounds with no measured copy progress.
* **unresponsive broker** — admin requests to a broker fail (timeouts) while metadata lists it alive.

:func:`mass_failure` is the guard: more than ``mass_failure_share`` of the brokers, or every broker of a
rack or IDC, failing at once means a network partition or a power event — alert only, never move data.

Guarantee: deterministic (sorted output, no clock, no randomness); every finding names the evidence it was
raised on; a detector never raises on NaN/inf metrics (they are skipped). Cost: O(rounds x (brokers x disks
+ partitions)); each round's disk verdicts are computed once (cached on the round): O(disks^2) in the
worst case, ~2 ms at 1,000 disks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from domain import BrokerState, ClusterSnapshot, DiskId, PartitionId

BROKER_DEAD = "broker-dead"
LOG_DIR_OFFLINE = "log-dir-offline"
DISK_FAIL_SLOW = "disk-fail-slow"
UNDER_REPLICATED = "under-replicated"
UNDER_MIN_ISR = "under-min-isr"
OFFLINE_PARTITIONS = "offline-partitions"
STUCK_REASSIGNMENT = "stuck-reassignment"
BROKER_UNRESPONSIVE = "broker-unresponsive"
MASS_FAILURE = "mass-failure"
KINDS = (BROKER_DEAD, LOG_DIR_OFFLINE, DISK_FAIL_SLOW, UNDER_REPLICATED, UNDER_MIN_ISR, OFFLINE_PARTITIONS,
         STUCK_REASSIGNMENT, BROKER_UNRESPONSIVE, MASS_FAILURE)
FIXABLE = frozenset({BROKER_DEAD, LOG_DIR_OFFLINE, DISK_FAIL_SLOW})
"""Kinds the self-healing loop may fix; the rest are warnings."""
EXAMPLES = 20


@dataclass(frozen=True)
class HealthRound:
    """What one collection round says about a cluster's health."""

    snapshot: ClusterSnapshot
    at: float
    """Seconds on the observer's clock (monotone across rounds of one cluster)."""
    maintenance: frozenset[int] = frozenset()
    offline_dirs: Mapping[int, frozenset[str]] = field(default_factory=dict)
    """Broker -> its log dirs reported offline this round (DescribeLogDirs ``KAFKA_STORAGE_ERROR``)."""
    offline_replicas: Mapping[int, frozenset[PartitionId]] = field(default_factory=dict)
    """Alive broker -> partitions whose replica on it Metadata lists offline (on a failed log dir)."""
    unresponsive: Mapping[int, str] = field(default_factory=dict)
    """Broker (alive in metadata) -> the admin error it answered with this round."""
    reassigning: Mapping[PartitionId, float] = field(default_factory=dict)
    """Partitions with a reassignment in flight -> measured copy bytes/s this round (0: no progress)."""
    min_isr: Mapping[str, int] = field(default_factory=dict)
    """Topic -> ``min.insync.replicas`` where known (else :attr:`DetectorConfig.default_min_isr`)."""
    copy_bytes: Mapping[DiskId, float] = field(default_factory=dict)
    """Disk -> bytes/s of replica copies in flight that read or write it (reassignments, KIP-113 moves)."""
    adding: Mapping[PartitionId, frozenset[int]] = field(default_factory=dict)
    """Partitions being moved -> the replicas the move adds (still copying, so not yet in the ISR)."""
    cache: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)
    """Per-round results the detectors share (verdicts per config)."""


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds of the detectors (defaults fit a 10 s collection interval)."""

    grace_s: float = 300.0
    """A dead broker's fix waits this long (planned restarts come back inside it)."""
    slow_rounds: int = 3
    """A disk must be slow in this many successive rounds."""
    slow_await_factor: float = 5.0
    """... with await at least this many times its peers' median ..."""
    slow_min_await_ms: float = 50.0
    """... and at least this many milliseconds."""
    saturated_util: float = 0.97
    """At or above this util the await is queueing (``1 / (1 - util)`` explodes): the disk is judged by its
    service time per byte instead, and not at all while Guardian's copies load it."""
    ceiling_share: float = 0.5
    """A disk that serves at least this share of its declared ``max_bytes_per_s`` per unit of util (bytes/s over
    util) is busy, not slow, whatever its await: it does what it was declared to do (a disk capped at its ceiling
    and kept at util 1 by a replaying consumer queues for seconds). A fail-slow disk serves far less."""
    own_copy_share: float = 0.3
    own_copy_util: float = 0.0
    """A disk whose load is at least ``own_copy_share`` Guardian's copies, at util ``own_copy_util`` or more, is
    not a fail-slow suspect (its await is ours); such rounds neither start nor end a slow streak."""
    min_peers: int = 2
    stuck_rounds: int = 6
    default_min_isr: int = 2
    mass_failure_share: float = 0.34
    """More than this share of brokers failing at once is a mass failure (alert only)."""
    whole_groups: tuple[str, ...] = ("idc",)
    """Every broker of one of these groups (``"idc"``, ``"rack"``) failing is a mass failure too (a rack of
    two dying together is healed by default; add ``"rack"`` to hold back then as well)."""


@dataclass(frozen=True)
class Finding:
    """One anomaly as detected now; :attr:`key` is stable while it lasts (the state's identity for it)."""

    kind: str
    key: str
    subject: Mapping[str, Any]
    evidence: Mapping[str, Any]
    confirmed: bool
    """True when persistence / grace conditions hold and a fix may be considered."""
    summary: str


def _finite(x: float) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return 0.0 if n == 0 else (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)


# ---------------------------------------------------------------------------------------------- brokers
def failed_brokers(r: HealthRound) -> set[int]:
    """Brokers dead in the round, or alive with every log dir offline (a broker that holds nothing)."""
    out = {b.id for b in r.snapshot.brokers if b.state is BrokerState.DEAD}
    for b in r.snapshot.brokers:
        dirs = {d.path for d in b.disks}
        if dirs and dirs <= set(r.offline_dirs.get(b.id, ())):
            out.add(b.id)
    return out


def detect_dead_brokers(history: Sequence[HealthRound], cfg: DetectorConfig) -> list[Finding]:
    """A finding per dead broker not in maintenance, confirmed after the grace period."""
    if not history:
        return []
    now = history[-1]
    out = []
    for b in sorted(now.snapshot.brokers, key=lambda b: b.id):
        if b.state is not BrokerState.DEAD or b.id in now.maintenance:
            continue
        since = now.at
        for r in reversed(history):
            state = next((x.state for x in r.snapshot.brokers if x.id == b.id), None)
            if state is not BrokerState.DEAD:
                break
            since = r.at
        dead_for = max(now.at - since, 0.0)
        hosted = sum(1 for p in now.snapshot.iter_partitions() if b.id in p.replicas)
        if not hosted:
            continue  # nothing of it is missing (its replicas were re-created elsewhere)
        size = sum(p.size_bytes for p in now.snapshot.iter_partitions() if b.id in p.replicas)
        out.append(Finding(BROKER_DEAD, f"{BROKER_DEAD}:{b.id}", {"broker": b.id, "rack": b.rack, "idc": b.idc},
                           {"dead_for_s": round(dead_for, 3), "grace_s": cfg.grace_s, "replicas": hosted,
                            "bytes": size, "rounds_dead": sum(1 for r in history if r.at >= since)},
                           dead_for >= cfg.grace_s,
                           f"broker {b.id} ({b.rack}) dead for {dead_for:.0f} s, {hosted} replica(s) on it"))
    return out


def detect_unresponsive(history: Sequence[HealthRound], cfg: DetectorConfig) -> list[Finding]:
    """Brokers listed alive that failed admin requests in the newest round (confirmed after two rounds)."""
    if not history:
        return []
    now = history[-1]
    alive = {b.id for b in now.snapshot.brokers if b.state is not BrokerState.DEAD}
    out = []
    for bid, err in sorted(now.unresponsive.items()):
        if bid not in alive or bid in now.maintenance:
            continue
        streak = 0
        for r in reversed(history):
            if bid not in r.unresponsive:
                break
            streak += 1
        out.append(Finding(BROKER_UNRESPONSIVE, f"{BROKER_UNRESPONSIVE}:{bid}", {"broker": bid},
                           {"error": err[:300], "rounds": streak}, streak >= 2,
                           f"broker {bid} is in metadata but its admin requests fail: {err[:120]}"))
    return out


# ---------------------------------------------------------------------------------------------- disks
def detect_offline_dirs(history: Sequence[HealthRound], cfg: DetectorConfig) -> list[Finding]:
    """Offline log dirs of living brokers (the JBOD disk died, the broker runs on). Confirmed while replicas
    are on the dir (the snapshot's last known dir of a replica, or Metadata's offline replicas of the broker
    when it has one failed dir); a failed dir holding nothing stays a warning (replace the disk)."""
    if not history:
        return []
    now = history[-1]
    alive = {b.id for b in now.snapshot.brokers if b.state is not BrokerState.DEAD}
    out = []
    for bid in sorted(now.offline_dirs):
        if bid not in alive or bid in now.maintenance:
            continue
        dirs = sorted(now.offline_dirs[bid])
        offline = now.offline_replicas.get(bid, frozenset())
        for path in dirs:
            on_it = [p for p in now.snapshot.iter_partitions()
                     for i, b in enumerate(p.replicas) if b == bid and i < len(p.log_dirs) and p.log_dirs[i] == path]
            listed = {p.id for p in on_it}
            extra = sorted(offline - listed) if len(dirs) == 1 else []
            names = [f"{p.topic}-{p.partition}" for p in on_it] + [f"{t}-{n}" for t, n in extra]
            held = len(names)
            out.append(Finding(LOG_DIR_OFFLINE, f"{LOG_DIR_OFFLINE}:{bid}:{path}", {"broker": bid, "log_dir": path},
                               {"replicas": held, "bytes": sum(p.size_bytes for p in on_it),
                                "offline_replicas": len(offline), "examples": names[:EXAMPLES]},
                               held > 0, f"log dir {path} of broker {bid} is offline ({held} replica(s)"
                               + (")" if held else "; it holds no replica: replace the disk)")))
    return out


@dataclass(frozen=True)
class DiskVerdict:
    """One disk in one round: ``slow`` True / False, or None when the round cannot judge it (its await is
    explained by load it is not to blame for: saturated under Guardian's own copies, or no usable figures)."""

    slow: bool | None
    figures: Mapping[str, Any]
    norm_ms: float | None = None
    """The disk's load-free latency this round (await x (1 - util)); None when not judged."""


def _idle_latency(await_ms: float, util: float, cfg: DetectorConfig) -> float:
    """The await the disk would show idle: ``await x (1 - util)`` (M/M/1: await = service / (1 - util)), util
    capped at the saturation mark. The await expected at a load is this over ``1 - util``."""
    return await_ms * (1.0 - min(max(util, 0.0), cfg.saturated_util))


def _verdicts(r: HealthRound, cfg: DetectorConfig) -> dict[DiskId, DiskVerdict]:
    """Every alive disk of one round judged (module docstring, "fail-slow disk"); cached on the round."""
    cached = r.cache.get(("verdicts", cfg))
    if cached is not None:
        return cached
    disks = []
    for b in r.snapshot.brokers:
        if b.state is BrokerState.DEAD:
            continue
        for d in b.disks:
            load = d.read_bytes_per_s + d.write_bytes_per_s
            if _finite(d.await_ms) and _finite(d.util) and _finite(load):
                disks.append(((b.id, d.path), d.kind, max(load, 0.0), d.await_ms, d.util,
                              max(float(r.copy_bytes.get((b.id, d.path), 0.0)), 0.0), d.max_bytes_per_s))
    judged = [x for x in disks if x[4] < cfg.saturated_util and (x[2] > 0 or x[3] > 0)]
    norms: dict[Any, list[tuple[DiskId, float, float]]] = defaultdict(list)
    for did, kind, _load, aw, util, _c, _ceiling in judged:
        norms[kind].append((did, _idle_latency(aw, util, cfg), aw))
    out: dict[DiskId, DiskVerdict] = {}
    for did, kind, load, aw, util, copies, ceiling in disks:
        fig: dict[str, Any] = {"await_ms": round(aw, 2), "util": round(util, 4), "bytes_per_s": round(load),
                               "copy_bytes_per_s": round(min(copies, load))}
        ours = copies / load if load > 0 else 0.0
        if ours >= cfg.own_copy_share and util >= cfg.own_copy_util:
            out[did] = DiskVerdict(None, {**fig, "basis": f"not judged: {ours:.0%} of its load is Guardian's copies "
                                                          f"(util {util:.2f})"})
            continue
        if aw < cfg.slow_min_await_ms:
            out[did] = DiskVerdict(False, fig, _idle_latency(aw, util, cfg))
            continue
        if util > 0 and _finite(ceiling) and ceiling > 0 and load / util >= cfg.ceiling_share * ceiling:
            out[did] = DiskVerdict(False, {**fig, "basis": f"busy, not slow: serves {load / util / 1e6:.2f} MB/s per "
                                                          f"unit of util, its declared ceiling {ceiling / 1e6:.2f}"})
            continue  # no idle latency: a queueing round is no baseline for its own history
        if util >= cfg.saturated_util:  # queueing rules the await: judge the service time per byte instead
            served = [x for x in disks if x[1] == kind and x[0] != did and x[2] > 0 and x[4] > 0]
            if copies > 0 or load <= 0 or len(served) < cfg.min_peers:
                out[did] = DiskVerdict(None, {**fig, "basis": "not judged: saturated"
                                                              + (" under Guardian's copies" if copies > 0 else "")})
                continue
            ref_cost = _median([x[4] / x[2] for x in served])
            slow = util / load >= cfg.slow_await_factor * ref_cost
            out[did] = DiskVerdict(slow, {**fig, "peer_await_ms": round(_median([x[3] for x in served]), 2),
                                          "peers": len(served), "basis": "service time (util per byte/s) vs peers"})
            continue
        norm = _idle_latency(aw, util, cfg)
        peers = [v for other, v, _aw in norms[kind] if other != did]
        if len(peers) < cfg.min_peers:
            out[did] = DiskVerdict(None, {**fig, "basis": "not judged: too few peers"}, norm)
            continue
        ref = _median(peers)
        expected = ref / (1.0 - min(util, cfg.saturated_util))
        slow = norm >= cfg.slow_await_factor * max(ref, 1e-3)
        peer_await = _median([a for other, _v, a in norms[kind] if other != did])
        out[did] = DiskVerdict(slow, {**fig, "peer_await_ms": round(peer_await, 2), "idle_latency_ms": round(norm, 2),
                                      "peer_idle_latency_ms": round(ref, 2), "expected_await_ms": round(expected, 2),
                                      "peers": len(peers),
                                      "basis": "await vs the await expected at its load (peers' idle latency)"}, norm)
    r.cache[("verdicts", cfg)] = out
    return out


def _own_baseline(history: Sequence[HealthRound], did: DiskId, before: float, cfg: DetectorConfig) -> float | None:
    """The disk's own idle latency when it was judged healthy, before ``before`` (median; None: no such round)."""
    own = [v.norm_ms for r in history if r.at < before
           for v in [_verdicts(r, cfg).get(did)] if v is not None and v.slow is False and v.norm_ms is not None]
    return _median(own) if len(own) >= cfg.slow_rounds else None


def detect_fail_slow(history: Sequence[HealthRound], cfg: DetectorConfig) -> list[Finding]:
    """Disks judged slow in their latest judged round; confirmed after ``slow_rounds`` slow rounds running (rounds
    that could not judge the disk neither break nor extend the streak, so an open anomaly stays open while its
    disk is only too busy with Guardian's copies to be judged)."""
    if not history:
        return []
    now = history[-1]
    out = []
    for did in sorted(_verdicts(now, cfg)):
        if did[0] in now.maintenance:
            continue
        streak = 0
        since = now.at
        last: DiskVerdict | None = None
        judged_now = _verdicts(now, cfg)[did]
        for r in reversed(history):
            v = _verdicts(r, cfg).get(did)
            if v is None or v.slow is None:
                continue
            if not v.slow:
                break
            streak += 1
            since = r.at
            last = last or v
        if last is None:
            continue
        baseline = _own_baseline(history, did, since, cfg)
        if baseline is not None and last.norm_ms is not None \
                and last.norm_ms < cfg.slow_await_factor * max(baseline, 1e-3):
            continue  # as slow as it always was (its own history): a model, not a failing disk
        held = sum(1 for p in now.snapshot.iter_partitions()
                   for i, b in enumerate(p.replicas) if b == did[0] and i < len(p.log_dirs) and p.log_dirs[i] == did[1])
        ev = {**last.figures, "rounds": streak, "rounds_needed": cfg.slow_rounds, "slow_since": since,
              "slow_for_s": round(now.at - since, 3), "replicas": held,
              "own_baseline_ms": None if baseline is None else round(baseline, 2)}
        if judged_now.slow is None:
            ev["now"] = judged_now.figures.get("basis", "not judged")
        out.append(Finding(DISK_FAIL_SLOW, f"{DISK_FAIL_SLOW}:{did[0]}:{did[1]}", {"broker": did[0], "log_dir": did[1]},
                           ev, streak >= cfg.slow_rounds and held > 0,
                           f"disk {did[1]} of broker {did[0]} is fail-slow: await {ev['await_ms']} ms vs "
                           f"{ev.get('expected_await_ms', ev.get('peer_await_ms'))} ms expected at its load from "
                           f"{ev.get('peers', 0)} peer(s) ({streak} round(s))"
                           + ("" if held else "; it holds no replica")))
    return out


def disk_judged_healthy(history: Sequence[HealthRound], disk: DiskId, cfg: DetectorConfig) -> bool:
    """True when the newest rounds judged ``disk`` healthy ``slow_rounds`` times running (its slowness is gone)."""
    n = 0
    for r in reversed(history):
        v = _verdicts(r, cfg).get(disk)
        if v is None or v.slow is None:
            continue
        if v.slow:
            return False
        n += 1
        if n >= cfg.slow_rounds:
            return True
    return False


def slow_disks(history: Sequence[HealthRound], cfg: DetectorConfig) -> set[DiskId]:
    """The disks :func:`detect_fail_slow` flags now (confirmed or not) — what throttle protection skips."""
    return {(int(f.subject["broker"]), str(f.subject["log_dir"])) for f in detect_fail_slow(history, cfg)}


# ---------------------------------------------------------------------------------------------- partitions
def detect_partitions(history: Sequence[HealthRound], cfg: DetectorConfig) -> list[Finding]:
    """One finding per kind (under-replicated, under-min-ISR, offline) naming the partitions (capped)."""
    if not history:
        return []
    now = history[-1]
    under: list[str] = []
    min_isr: list[str] = []
    offline: list[str] = []
    for t in now.snapshot.topics:
        need = now.min_isr.get(t.name, cfg.default_min_isr)
        for p in t.partitions:
            name = f"{p.topic}-{p.partition}"
            if p.leader is None:
                offline.append(name)
            isr = set(p.isr)
            adding = now.adding.get(p.id, frozenset())
            if adding and set(p.replicas) - isr <= adding:
                continue  # under-replicated only because a move's new replica is still copying
            kept = set(p.replicas) - adding
            if len(isr & kept) < len(kept):
                under.append(name)
            if len(isr) < min(need, len(kept)):
                min_isr.append(name)
    out = []
    for kind, names in ((UNDER_REPLICATED, under), (UNDER_MIN_ISR, min_isr), (OFFLINE_PARTITIONS, offline)):
        if names:
            out.append(Finding(kind, f"{kind}:{now.snapshot.cluster}", {"cluster": now.snapshot.cluster},
                               {"count": len(names), "examples": sorted(names)[:EXAMPLES]}, True,
                               f"{len(names)} {kind} partition(s)"))
    return out


def detect_stuck(history: Sequence[HealthRound], cfg: DetectorConfig) -> list[Finding]:
    """Reassignments in flight with no copy progress over the last ``stuck_rounds`` rounds."""
    if len(history) < cfg.stuck_rounds:
        return []
    window = history[-cfg.stuck_rounds:]
    stuck = [tp for tp in sorted(window[-1].reassigning)
             if all(tp in r.reassigning and not r.reassigning[tp] > 0 for r in window)]
    if not stuck:
        return []
    span = window[-1].at - window[0].at
    return [Finding(STUCK_REASSIGNMENT, f"{STUCK_REASSIGNMENT}:{window[-1].snapshot.cluster}",
                    {"cluster": window[-1].snapshot.cluster},
                    {"count": len(stuck), "rounds": cfg.stuck_rounds, "span_s": round(span, 1),
                     "examples": [f"{t}-{p}" for t, p in stuck[:EXAMPLES]]}, True,
                    f"{len(stuck)} reassignment(s) made no progress for {span:.0f} s")]


# ---------------------------------------------------------------------------------------------- guard
def mass_failure(r: HealthRound, cfg: DetectorConfig) -> Finding | None:
    """A mass failure now: more than the configured share of brokers failed, or a whole IDC (or rack, see
    :attr:`DetectorConfig.whole_groups`) of more than one broker — in maintenance or not, a power event does
    not ask first. None otherwise."""
    failed = failed_brokers(r)
    brokers = r.snapshot.brokers
    if not failed or not brokers:
        return None
    share = len(failed) / len(brokers)
    whole: list[str] = []
    for attr in cfg.whole_groups:
        groups: dict[str, set[int]] = defaultdict(set)
        for b in brokers:
            groups[getattr(b, attr)].add(b.id)
        distinct = len(groups)
        whole += [f"{attr} {g}" for g, ids in sorted(groups.items())
                  if len(ids) > 1 and ids <= failed and distinct > 1]
    if share <= cfg.mass_failure_share and not whole:
        return None
    return Finding(MASS_FAILURE, f"{MASS_FAILURE}:{r.snapshot.cluster}", {"cluster": r.snapshot.cluster},
                   {"failed": sorted(failed), "brokers": len(brokers), "share": round(share, 3),
                    "limit": cfg.mass_failure_share, "whole": whole}, True,
                   f"{len(failed)}/{len(brokers)} brokers failed at once"
                   + (f" ({', '.join(whole)})" if whole else "") + ": alert only, no healing")


def detect_all(history: Sequence[HealthRound], cfg: DetectorConfig) -> list[Finding]:
    """Every detector over ``history``; the mass-failure finding (if any) first."""
    if not history:
        return []
    guard = mass_failure(history[-1], cfg)
    found = [*detect_dead_brokers(history, cfg), *detect_offline_dirs(history, cfg), *detect_fail_slow(history, cfg),
             *detect_unresponsive(history, cfg), *detect_partitions(history, cfg), *detect_stuck(history, cfg)]
    return ([guard] if guard else []) + found
