"""Migration throttles: the rates this pass's copies may run at, and the cluster's configs kept equal to them.

Goal: every copy runs throttled (KIP-73 leader/follower rates and throttled-replica lists, KIP-113
intra-broker rate) at a rate that keeps its disks under the policy's threshold, and no throttle outlives
the copies that needed it.

Method: :meth:`MigrationLevers.rates` computes the rates from live disk headroom and the migration
each disk carried (:mod:`controlplane.executor.migration_rate`, fed by :class:`~controlplane.executor.copy_meter.
CopyMeter`), capped by the throttle protection's ceilings by the kernel's one rule (:func:`domain.throttles.
migration_rate`: protection is a ceiling, the migration runs under it, never below the rate its copies need to
finish). :meth:`MigrationLevers.sync` then makes the cluster show exactly those rates and lists — written only
through the one writer of throttle configs, :class:`~kafkaio.throttle_writer.ThrottleWriter` — level-based:
per target (broker or topic) it compares what is wanted, what this executor recorded in the store, and what
the cluster shows *now*; a change is recorded first (write-ahead: the union of wanted and recorded, so a crash
between record and apply still knows what to clean) — in the store and, through ``announce``, in the cluster's
execution lease — then applied, then the record is set to what is wanted or cleared.

Guarantee: a throttle someone else removed or changed is put back; only entries this executor recorded
are ever removed (others' list entries are left alone); a target whose read or change fails is reported
(the pass then holds the copies it would throttle) and retried next pass; a dead broker keeps its record
until it is back. A rate only rises after the copies it was computed for have started (:meth:`safe`).

Cost: one config read per kind and at most one write per changed target per pass.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from collectors.disk_rates import DiskRate
from controlplane.executor.copy_meter import CopyMeter
from controlplane.executor.migration_rate import (
    CATCH_UP_MARGIN,
    CopyFlow,
    MigrationRatePolicy,
    NetRate,
    PendingWork,
    Role,
    broker_rates,
    disk_budgets,
    resources,
)
from controlplane.executor.migration_sides import BOTH, DIRS, FOLLOWER, LEADER, choose, realized, roles_on, task_of
from controlplane.state.reads import throttle_records
from controlplane.state.store import StateStore
from domain.throttles import (
    FOLLOWER_RATE,
    FOLLOWER_REPLICAS,
    LEADER_RATE,
    LEADER_REPLICAS,
    MIGRATION_CEILINGS,
    migration_rate,
)
from kafkaio.errors import AdminError
from kafkaio.port import KafkaCluster
from kafkaio.throttle_writer import ThrottleWriter
from kafkaio.types import LiveCluster
from raft.protocol import JsonDict

log = logging.getLogger("guardian.executor")
THROTTLE_PREFIX = "migration."
"""Kind prefix of the throttles the executor records (``migration.broker``, ``migration.topic``)."""
Lists = dict[str, dict[str, set[str]]]
"""topic -> throttled-replica list key -> entries (``partition:broker``)."""


def side_floors(flows: list[CopyFlow], sides: Mapping[str, str]) -> dict[Role, float]:
    """Per rate: the rate below which the copies listed for it can never finish (KIP-73 throttles the follower's
    whole fetch, new writes included) — Σ their ingress x :data:`~.migration_rate.CATCH_UP_MARGIN` — plus their heal
    floors (:attr:`~.migration_rate.CopyFlow.floor_bytes_per_s`: a self-healing copy runs at least at its share of the
    allowed heal rate, above any protection ceiling)."""
    out: dict[Role, float] = {}
    for f in flows:
        for r in roles_on(f, sides[f.key]):
            out[r] = out.get(r, 0.0) + f.ingress_bytes_per_s * CATCH_UP_MARGIN + f.floor_bytes_per_s
    return out


def _close(a: str, b: str, tolerance: float = 0.02) -> bool:
    """True when two rate config values differ by at most ``tolerance`` (relative); garbage is never close."""
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return abs(x - y) <= tolerance * max(abs(y), 1.0)


@dataclass(frozen=True)
class _ThrottleKind:
    """How one kind of migration throttle is compared, recorded and named (see ``MigrationLevers._sync_kind``)."""

    kind: str
    what: str
    idle_why: str
    record_key: Callable[[Any], str]
    present: Callable[[LiveCluster, Any], bool]
    changes: Callable[[dict[str, Any], dict[str, Any], Mapping[str, str]], Any]
    merge: Callable[[dict[str, Any], dict[str, Any], Any], dict[str, Any]]
    same: Callable[[dict[str, Any], dict[str, Any]], bool]
    target: Callable[[Any, dict[str, Any]], JsonDict]
    rate: Callable[[dict[str, Any]], float]
    clear_when_absent: bool = False
    absent_why: str = ""


def _rate_changes(want: dict[str, Any], have: dict[str, Any], actual: Mapping[str, str]) -> dict[str, str | None]:
    """Broker rate configs to SET (value) or DELETE (``None``) so the broker shows ``want``."""
    out: dict[str, str | None] = {}
    for k in set(want) | set(have):
        if k not in want:
            if k in actual:
                out[k] = None
        elif k not in actual or not _close(want[k], actual[k]):
            out[k] = want[k]
    return out


def _list_changes(want: dict[str, Any], have: dict[str, Any], actual: Mapping[str, str]
                  ) -> dict[str, tuple[set[str], set[str]]]:
    """Throttled-replica entries to APPEND / SUBTRACT per list (only what this executor recorded is removed)."""
    out = {}
    for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
        cur = actual.get(k, "")
        cur_set = {e.strip() for e in cur.split(",") if e.strip()}
        adds = set() if cur.strip() == "*" else set(want.get(k, set())) - cur_set
        subs = (set(have.get(k, set())) - set(want.get(k, set()))) & cur_set
        if adds or subs:
            out[k] = (adds, subs)
    return out


_BROKER_RATES = _ThrottleKind(
    kind=THROTTLE_PREFIX + "broker", what="migration throttle", idle_why="no migration on this broker",
    record_key=lambda b: f"mig.b{b}", present=lambda live, b: b in live.alive, changes=_rate_changes,
    merge=lambda want, have, changes: {**have, **{k: v for k, v in changes.items() if v is not None}},
    same=lambda want, have: set(want) == set(have) and all(_close(want[k], have[k]) for k in want),
    target=lambda b, configs: {"broker": b, "configs": configs},
    rate=lambda configs: max((float(v) for v in configs.values()), default=0.0))

_REPLICA_LISTS = _ThrottleKind(
    kind=THROTTLE_PREFIX + "topic", what="throttled replicas", idle_why="no migration on this topic",
    record_key=lambda t: f"mig.t.{t}", present=lambda live, t: t in live.topic_sizes, changes=_list_changes,
    merge=lambda want, have, changes: {k: set(want.get(k, set())) | set(have.get(k, set()))
                                       for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS)},
    same=lambda want, have: all(set(want.get(k, set())) == set(have.get(k, set()))
                                for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS)),
    target=lambda t, lists: {"topic": t, **{k: sorted(lists.get(k, set()))
                                           for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS)}},
    rate=lambda lists: 0.0, clear_when_absent=True, absent_why="topic deleted")


class MigrationLevers:
    """The migration throttles of one cluster (see the module docstring)."""

    def __init__(self, store: StateStore, admin: KafkaCluster, cluster: str, policy: MigrationRatePolicy,
                 meter: CopyMeter, propose: Callable[..., Any], announce: Callable[[], None] | None = None,
                 interval_s: float = 0.0) -> None:
        self.store = store
        self.announce = announce
        """Called after a change is recorded in the store and before it is applied (the executor records its
        throttles in the cluster's execution lease there, so another executor can clean them if it dies)."""
        self.admin = admin
        self.writer = ThrottleWriter(admin)
        """The one writer of throttle configs: this executor hands it the rates and list entries it wants."""
        self.cluster = cluster
        self.policy = policy
        self.meter = meter
        self._propose = propose
        self.commanded: dict[str, float] = {}
        """CopyFlow key -> bytes/s its throttles allowed it in the last pass with a fresh clock."""
        self.interval_s = interval_s
        """The longest the loop waits between passes: the rates chosen must hold at least that long (a pass may
        come sooner than the last interval suggests, or as late as this)."""
        self.next_end_s: float | None = None
        """Seconds until the first copy of the last pass is expected to end at its planned rate (joint choice)."""
        self.in_force: dict[tuple[int, str], float] = {}
        """(broker, config) -> the rate recorded in force when this pass's rates were computed."""
        self._pass_clock: tuple[float | None, float | None] = (None, None)
        """(previous, latest) time base of passes with a fresh measurement: their gap predicts the next one."""

    def tick(self, now: float | None) -> None:
        """A pass with a fresh clock: its time base becomes the latest."""
        if now is not None:
            self._pass_clock = (self._pass_clock[1], now)

    def owned(self) -> dict[str, JsonDict]:
        """The throttles this executor recorded for its cluster (copies)."""
        records = self.store.read(lambda s: throttle_records(s, self.cluster))
        return {k: r.to_json() for k, r in records.items() if r.kind.startswith(THROTTLE_PREFIX)}

    def rates(self, flows: list[CopyFlow], now: float | None, disks: Mapping[tuple[int, str], DiskRate],
              network: Mapping[int, NetRate] | None, lists: Lists | None = None,
              pending: PendingWork | None = None) -> tuple[dict[Role, float], Lists]:
        """KIP-73 / KIP-113 rates per ``(broker, config)`` for this pass's ``flows``, and the throttled-replica
        ``lists`` they need: the policy's rates from live disk headroom and the migration each disk carried,
        capped by the throttle protection's ceilings (never below what the copies need to ever finish). The
        adaptive ``joint`` choice (:mod:`.migration_sides`) also chooses the side each copy is listed on (the
        lists are cut to it), weighing each disk by the work left on it (``pending``: bytes the tasks not
        started yet will read or write); otherwise every copy is listed on both sides. A pass with
        a fresh clock (``now``) also remembers the rate each flow was commanded and the flows themselves
        (for the next pass)."""
        lists = dict(lists or {})
        self.next_end_s = None
        if not flows:
            return {}, lists
        policy = self.policy
        epoch = now if now is not None and now > 1e9 else time.time()
        previous = {}
        for rec in self.owned().values():
            if rec["kind"] == THROTTLE_PREFIX + "broker":
                for k, v in rec["target"].get("configs", {}).items():
                    previous[(int(rec["target"]["broker"]), k)] = float(v)
        migration = self.meter.disk_migration(flows, self.commanded)
        if now is not None:
            self.meter.remember(flows)
        last, latest = self._pass_clock
        horizon = 1.25 * max(latest - last, self.interval_s) if last is not None and latest is not None and \
            latest > last else None
        self.in_force = previous
        ceilings = self.protection_ceilings()
        if policy.mode == "adaptive" and policy.choice == "joint":
            rates, sides, lists = self._joint(flows, disks, network, previous, epoch, migration, horizon, lists,
                                              pending or PendingWork(), ceilings)
        else:
            rates = broker_rates(flows, disks, policy, previous, epoch, network, migration, horizon)
            sides = {f.key: BOTH if f.kind == "move" else DIRS for f in flows}
        floors = side_floors(flows, sides)
        for (b, key), ceiling in ceilings.items():  # protection is a ceiling, the migration runs under it ...
            if (b, key) in rates:  # ... down to the rate the copies need to ever finish
                rates[(b, key)] = migration_rate(rates[(b, key)], ceiling, floors.get((b, key), 0.0))
        if now is not None:
            allowed = realized(flows, sides, rates)
            self.commanded = {f.key: allowed[f.key] for f in flows}
        return rates, lists

    def _joint(self, flows: list[CopyFlow], disks: Mapping[tuple[int, str], DiskRate],
               network: Mapping[int, NetRate] | None, previous: Mapping[Role, float], epoch: float,
               migration: Mapping[tuple[int, str], float], horizon: float | None, lists: Lists,
               pending: PendingWork, ceilings: Mapping[Role, float]
               ) -> tuple[dict[Role, float], dict[str, str], Lists]:
        """The joint choice (:func:`~.migration_sides.choose`) turned into rates within the policy's limits, and
        the lists cut to the chosen sides. A copy touching a disk without live data stays on both sides at
        its rates in force (no data, no headroom); a copy into a broker whose follower rate the protection
        caps stays on the follower side. A copy listed on the leader side is listed for every replica that
        may lead it, and a replica that has no leader rate gets one (a leader change never unthrottles)."""
        policy = self.policy
        ceiling = max(min(policy.ceiling, policy.schedule.ceiling(epoch)), policy.floor)
        res = resources(flows, disks, policy.planning_target, migration,
                        network if policy.nic_bytes_per_s else None, policy.nic_bytes_per_s)
        seen = {i for r_ in res for i, _ in r_.members}
        with_data = {d[0] for d in disks}
        forced_task: dict[str, str] = {}
        for i, f in enumerate(flows):
            if f.kind != "move":
                continue
            t = task_of(f)
            blind = (i not in seen or (f.src_disk is not None and f.src_disk not in disks)
                     or (f.dst_disk is not None and f.dst_disk not in disks)
                     or (f.dst_disk is None and f.dst_broker not in with_data))
            if blind:
                forced_task[t] = BOTH
            elif (f.dst_broker, FOLLOWER_RATE) in ceilings and forced_task.get(t) != BOTH:
                forced_task[t] = FOLLOWER
        forced = {f.key: forced_task[task_of(f)] for f in flows if f.kind == "move" and task_of(f) in forced_task}
        caps: dict[Role, float] = dict(ceilings)
        blind_roles = {r for f in flows if forced.get(f.key) == BOTH for r in roles_on(f, BOTH)}
        blind_roles |= {r for i, f in enumerate(flows) if f.kind != "move" and i not in seen for r in roles_on(f, DIRS)}
        for r in blind_roles:
            caps[r] = min(caps.get(r, math.inf), previous.get(r, policy.initial))
        work: dict[tuple[int, str], float] = {}
        for f in flows:
            left = float(f.remaining_bytes or 0.0)
            if f.src_disk is not None:
                work[f.src_disk] = work.get(f.src_disk, 0.0) + left
            dsts = [f.dst_disk] if f.dst_disk is not None else [d for d in disks if d[0] == f.dst_broker]
            for d in dsts:
                work[d] = work.get(d, 0.0) + left / len(dsts)
        work = pending.expected(work, disk_budgets(disks, migration, policy.planning_target))
        choice = choose(flows, res, work, ceiling, caps, forced, horizon, floor=policy.floor)
        self.next_end_s = min((float(f.remaining_bytes) / (choice.planned[f.key] - f.ingress_bytes_per_s) for f in flows
                               if f.remaining_bytes is not None
                               and choice.planned.get(f.key, 0.0) > f.ingress_bytes_per_s), default=None)
        floors = side_floors(flows, choice.sides)
        rates: dict[Role, float] = {}
        for key, target in choice.rates.items():
            prev = previous.get(key, policy.initial)
            if key not in blind_roles and target > prev:
                target = prev + policy.gain * (target - prev)
            rates[key] = float(max(min(max(target, policy.floor), ceiling), floors.get(key, 0.0)))
        out: Lists = {}
        backstop: dict[Role, float] = {}
        for f in flows:
            if f.kind != "move" or f.tp is None or f.tp[0] not in lists:
                continue
            side, (topic, part) = choice.sides[f.key], f.tp
            entry = out.setdefault(topic, {LEADER_REPLICAS: set(), FOLLOWER_REPLICAS: set()})
            if side in (LEADER, BOTH):
                mine = {e for e in lists[topic].get(LEADER_REPLICAS, set()) if e.split(":")[0] == str(part)}
                entry[LEADER_REPLICAS] |= mine
                for e in mine:
                    role = (int(e.split(":")[1]), LEADER_RATE)
                    if role not in rates:  # a replica that may lead this copy: throttled should it take over
                        backstop[role] = backstop.get(role, 0.0) + max(choice.planned[f.key],
                                                                       f.ingress_bytes_per_s * CATCH_UP_MARGIN)
            if side in (FOLLOWER, BOTH):
                entry[FOLLOWER_REPLICAS] |= {e for e in lists[topic].get(FOLLOWER_REPLICAS, set())
                                             if e == f"{part}:{f.dst_broker}"}
        for role, want in backstop.items():
            rates[role] = float(min(max(want, policy.floor), ceiling))
        return rates, choice.sides, out

    def safe(self, rates: Mapping[tuple[int, str], float]) -> dict[tuple[int, str], float]:
        """``rates`` with every rise held at the rate in force: a rate that rises waits until the pass's new
        copies have started (before, the copies already running would split it among fewer and run faster
        than planned)."""
        return {k: min(v, self.in_force.get(k, v)) for k, v in rates.items()}

    def protection_ceilings(self) -> dict[tuple[int, str], float]:
        """Migration rates the throttle protection (issue 5) has in force, as ceilings per broker."""
        def read(state: JsonDict) -> dict[tuple[int, str], float]:
            out: dict[tuple[int, str], float] = {}
            for v in state["throttles"].get(self.cluster, {}).values():
                key = MIGRATION_CEILINGS.get(str(v.get("kind")))
                broker = (v.get("target") or {}).get("broker")
                if key is None or not isinstance(broker, int):
                    continue
                rate = float(v.get("rate_bytes_per_s", 0.0))
                out[(broker, key)] = min(out.get((broker, key), math.inf), rate)
            return out

        return self.store.read(read)

    def sync(self, rates: Mapping[tuple[int, str], float],
                        lists: Mapping[str, Mapping[str, set[str]]], live: LiveCluster) -> set[Any]:
        """Make the cluster's migration throttles exactly ``rates`` and ``lists``; record before setting.

        Level-based: compares with the configs *read from the cluster* this pass, so a throttle someone
        else removed or changed is put back, and only entries this executor recorded are ever removed
        (list entries of others are left alone). Returns the brokers (ids) and topics (names) whose
        change failed (retried next pass).
        """
        owned = self.owned()
        want_b: dict[Any, dict[str, Any]] = {}
        for (b, key), r in rates.items():
            want_b.setdefault(b, {})[key] = str(int(r))
        have_b: dict[Any, dict[str, Any]] = {int(v["target"]["broker"]): dict(v["target"].get("configs", {}))
                                             for v in owned.values() if v["kind"] == THROTTLE_PREFIX + "broker"}
        empty: dict[str, set[str]] = {LEADER_REPLICAS: set(), FOLLOWER_REPLICAS: set()}
        want_t: dict[Any, dict[str, Any]] = {t: {k: set(v.get(k, set())) for k in empty} for t, v in lists.items()}
        have_t: dict[Any, dict[str, Any]] = {str(v["target"]["topic"]): {k: set(v["target"].get(k, [])) for k in empty}
                                             for v in owned.values() if v["kind"] == THROTTLE_PREFIX + "topic"}
        failed = self._sync_kind(_BROKER_RATES, want_b, have_b, live, self.admin.broker_configs,
                                 self.writer.set_migration_rates)
        return failed | self._sync_kind(_REPLICA_LISTS, want_t, have_t, live, self.admin.topic_configs,
                                        self._apply_lists)

    def _apply_lists(self, topic: str, changes: Mapping[str, tuple[set[str], set[str]]]) -> None:
        for k in (LEADER_REPLICAS, FOLLOWER_REPLICAS):
            adds, subs = changes.get(k, (set(), set()))
            self.writer.change_throttled_replicas(topic, k, append=adds, subtract=subs)

    def _sync_kind(self, kind: _ThrottleKind, want: Mapping[Any, dict[str, Any]], have: Mapping[Any, dict[str, Any]],
                   live: LiveCluster, read: Callable[[list[Any]], Mapping[Any, Mapping[str, str]]],
                   apply: Callable[[Any, Any], None]) -> set[Any]:
        """One read-compare-record-apply round over the targets (brokers or topics) of one kind of throttle.

        Per target: the desired value, what this executor recorded, and what the cluster shows are compared;
        a needed change is recorded first (the union of desired and recorded, so a crash between record and
        apply still knows to clean it), then applied; the record is then set to the desired value, or
        cleared when nothing is desired. Targets the cluster cannot show (dead broker, deleted topic) keep
        or drop their record as ``kind`` says. Returns the targets whose read or change failed.
        """
        cluster = self.cluster
        targets = sorted(set(want) | set(have))
        present = [x for x in targets if kind.present(live, x)]
        failed: set[Any] = set()
        actual: Mapping[Any, Mapping[str, str]] | None = {}
        if present:
            try:
                actual = read(present)
            except AdminError as exc:
                log.warning("reading %s failed: %s", kind.what, exc)
                failed.update(present)
                actual = None
        def settle(x: Any, w: dict[str, Any], changed: bool) -> None:
            key = kind.record_key(x)
            if any(w.values()):
                self._propose("throttle.set", kind.what, cluster=cluster, key=key, kind=kind.kind,
                              target=kind.target(x, w), rate_bytes_per_s=kind.rate(w))
            elif x in have or changed:
                self._propose("throttle.clear", kind.idle_why, cluster=cluster, key=key)

        pending: list[tuple[Any, Any, dict[str, Any]]] = []
        for x in targets:
            key, w, h = kind.record_key(x), want.get(x, {}), have.get(x, {})
            if not kind.present(live, x):
                if kind.clear_when_absent and x in have:
                    self._propose("throttle.clear", kind.absent_why, cluster=cluster, key=key)
                continue  # a dead broker cannot be altered: keep the record, clear it once it is back
            if actual is None:
                continue
            changes = kind.changes(w, h, actual.get(x, {}))
            if changes:
                merged = kind.merge(w, h, changes)
                self._propose("throttle.set", f"{kind.what} (write-ahead)", cluster=cluster, key=key,
                              kind=kind.kind, target=kind.target(x, merged), rate_bytes_per_s=kind.rate(merged))
                pending.append((x, changes, w))
            elif not kind.same(w, h):
                settle(x, w, False)
        if pending and self.announce is not None:
            try:
                self.announce()  # the cluster-side record (the lease) lists them before they are set
            except AdminError as exc:
                log.warning("recording %s on the cluster failed: %s", kind.what, exc)
                return failed | {x for x, _, _ in pending}
        for x, changes, w in pending:
            try:
                apply(x, changes)
            except AdminError as exc:  # recorded (write-ahead): retried next pass
                log.warning("%s change on %s failed: %s", kind.what, x, exc)
                failed.add(x)
                continue
            settle(x, w, True)
        return failed
