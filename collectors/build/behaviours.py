"""Stage 9 of a build: where every replica lives, and the six-way split of each disk's I/O.

Goal: per disk, :class:`~collectors.pagecache.Behaviours` — user write (bytes-in on the leader's
disk), replication write (bytes-in on in-sync followers' disks, plus the catch-up rate of
out-of-sync followers), user read (the page-cache misses of leader fetches), replication read
(out-of-sync followers behind R·T), migration write/read (reassignment targets' size growth and
KIP-113 future replicas' growth, read from the source disk) — the copies in flight at their
measured rates, and each partition's lagging followers and migration rate.

Method: :func:`replica_layout` maps every replica to (partition, disk id, role) arrays — roles 0
leader, 1 in-sync follower, 2 out-of-sync follower, 3 reassignment target — and is reused while
metadata, liveness, reassignments and known log dirs are unchanged; :func:`split_behaviours` sums
leaders' and in-sync followers' figures per disk with ``np.bincount`` and walks only the roles ≥ 2
and the future replicas in Python. Guarantee: a replica whose log dir no listing has named is
placed on the broker's ``unknown`` placeholder dir and counted (``coverage.unknown_log_dirs``),
never on a guessed disk; a copy's rate is a measured size growth, else it is not reported.
Cost: O(replicas) Python when the layout changes, else O(replicas) numpy + O(special replicas).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collectors.build.disks import DiskKey
from collectors.build.methods import InFigures
from collectors.build.names import PLACEHOLDER_DIR
from collectors.build.partition_rates import F64, PartitionCounters, PartitionIndex
from collectors.build.reads import Reads
from collectors.build.records import BrokerPayloads, CopyInFlight, DiskFacts, ModelConfig, ReplicaLayout
from collectors.build.state import DiskBook
from collectors.completeness import Coverage
from collectors.pagecache import BEHAVIOURS, Behaviours, is_disk_read
from collectors.rates import VectorCounterTracker
from kafkaio.types import KafkaState, PartitionMeta


def replica_layout(ix: PartitionIndex, state: KafkaState, alive: set[int], book: DiskBook, cfg: ModelConfig,
                   cov: Coverage) -> ReplicaLayout:
    """This round's replica layout (cached in ``book`` while its inputs are unchanged); records the
    replicas without a known log dir in ``cov`` and ``book``."""
    pms = ix.pms
    sig = (pms, frozenset(alive), frozenset((k, v.adding) for k, v in state.reassignments.items()), book.version)
    rc = book.layout_cache
    if rc is not None and rc[0][3] == sig[3] and rc[0][1] == sig[1] and rc[0][2] == sig[2] and rc[0][0] == sig[0]:
        lay = rc[1]
    else:
        lay = _replicas(ix.keys, pms, state, alive, book, cfg)
        book.layout_cache = (sig, lay)
    cov.unknown_log_dirs = lay.unknown
    book.unknown_dirs_last_round = lay.unknown
    book.unknown_dir_brokers = set(lay.unknown_brokers)
    return lay


def _replicas(keys: list[tuple[str, int]], pms: list[PartitionMeta], state: KafkaState, alive: set[int],
              book: DiskBook, cfg: ModelConfig) -> ReplicaLayout:
    """Log dir of every replica and the replica arrays (partition, disk id, role) of alive brokers.

    Roles: 0 leader, 1 in-sync follower, 2 out-of-sync follower, 3 reassignment target. O(replicas).
    """
    disk_ids: dict[tuple[int, str], int] = {}
    unknown = 0
    unknown_brokers: set[int] = set()
    dir_cache = book.dirs
    log_dirs: list[tuple[str, ...]] = []
    r_part: list[int] = []
    r_disk: list[int] = []
    r_role: list[int] = []
    lead_disk = np.full(len(keys), -1, dtype=np.int64)
    reas = state.reassignments
    for i, (key, pm) in enumerate(zip(keys, pms, strict=True)):
        t, pn = key
        dirs = []
        rinfo = reas.get(key)
        for b in pm.replicas:
            rpath = dir_cache.get((b, t, pn))
            if rpath is None:
                unknown += 1
                unknown_brokers.add(b)
                rpath = PLACEHOLDER_DIR
                book.facts.setdefault(b, {}).setdefault(
                    PLACEHOLDER_DIR, DiskFacts(PLACEHOLDER_DIR, cfg.default_disk_kind, 1, 1.0))
            dirs.append(rpath)
            if b not in alive:
                continue
            did = disk_ids.get((b, rpath))
            if did is None:
                did = disk_ids[(b, rpath)] = len(disk_ids)
            r_part.append(i)
            r_disk.append(did)
            if rinfo is not None and b in rinfo.adding:
                r_role.append(3)
            elif b == pm.leader:
                r_role.append(0)
                lead_disk[i] = did
            elif b in pm.isr:
                r_role.append(1)
            else:
                r_role.append(2)
        log_dirs.append(tuple(dirs))
    return ReplicaLayout(disk_ids, log_dirs, np.asarray(r_part, dtype=np.int64), np.asarray(r_disk, dtype=np.int64),
                         np.asarray(r_role, dtype=np.int8), lead_disk, unknown, frozenset(unknown_brokers),
                         [pm.isr if all(b in pm.replicas for b in pm.isr)
                          else tuple(b for b in pm.isr if b in pm.replicas) for pm in pms])


@dataclass(frozen=True)
class BehaviourRound:
    """Per disk the six behaviours; the copies in flight; per partition index the lagging
    followers and the migration rate (bytes per second)."""

    behaviours: dict[DiskKey, Behaviours]
    copies: list[CopyInFlight]
    lagging: dict[int, list[int]]
    migration: F64


def split_behaviours(ix: PartitionIndex, lay: ReplicaLayout, pc: PartitionCounters, fin: InFigures, reads: Reads,
                     state: KafkaState, payloads: BrokerPayloads, tracker: VectorCounterTracker,
                     dirs: dict[tuple[int, str, int], str], disk_ceiling: float = math.inf) -> BehaviourRound:
    """The six behaviours of every disk of an alive broker, and the copies in flight."""
    keys, pidx, n = ix.keys, ix.pidx, ix.n
    sp_size_rate, sp_leo_rate, sp_leo_val = pc.sp_size_rate, pc.sp_leo_rate, pc.sp_leo_val
    bpm, msgs, leo, residence = fin.bpm, fin.msgs, fin.leo, reads.residence
    disk_ids = dict(lay.disk_ids)
    rp, rd_, rr_, lead_disk = lay.r_part, lay.r_disk, lay.r_role, lay.lead_disk
    migration = np.zeros(n)
    nd = len(disk_ids)
    b_in0 = np.nan_to_num(fin.b_in)
    dr0 = np.nan_to_num(reads.dr)
    beh_a: dict[str, npt.NDArray[np.float64]] = {name: np.zeros(nd) for name in BEHAVIOURS}
    if len(rp):
        m0, m1 = rr_ == 0, rr_ == 1
        beh_a["user_write"] = np.bincount(rd_[m0], weights=b_in0[rp[m0]], minlength=nd).astype(np.float64)
        beh_a["user_read"] = np.bincount(rd_[m0], weights=dr0[rp[m0]], minlength=nd).astype(np.float64)
        beh_a["replication_write"] = np.bincount(rd_[m1], weights=b_in0[rp[m1]],
                                                 minlength=nd).astype(np.float64)
    lagging: dict[int, list[int]] = {}
    copies: list[CopyInFlight] = []
    disk_keys = list(disk_ids)
    for j in np.nonzero(rr_ >= 2)[0].tolist():
        i = int(rp[j])
        key = keys[i]
        did = int(rd_[j])
        b = disk_keys[did][0]
        if rr_[j] == 3:
            cr = sp_size_rate.get((b, *key), 0.0)
            if (b, *key) in sp_size_rate:
                copies.append(CopyInFlight("reassign", key[0], key[1],
                                           disk_keys[lead_disk[i]] if lead_disk[i] >= 0 else None,
                                           disk_keys[did], cr))
            migration[i] += cr
            beh_a["migration_write"][did] += cr
            if lead_disk[i] >= 0:
                beh_a["migration_read"][lead_disk[i]] += cr
            continue
        f_rate = sp_leo_rate.get((b, *key))
        f_leo = sp_leo_val.get((b, *key))
        if f_rate is None or np.isnan(bpm[i]):
            continue
        fw = f_rate * float(bpm[i])
        beh_a["replication_write"][did] += fw
        lagging.setdefault(i, []).append(b)
        t_res = float(residence[i])
        if (lead_disk[i] >= 0 and not np.isnan(leo[i]) and f_leo is not None and not math.isnan(t_res)
                and is_disk_read(float(leo[i]), 0.0 if np.isnan(msgs[i]) else float(msgs[i]), t_res, f_leo)):
            beh_a["replication_read"][lead_disk[i]] += fw
    # intra-broker future replicas (KIP-113): copy rate from the growth of the future's size
    for b, path, key, size in state.futures:
        if b not in payloads or key not in pidx:
            continue
        _, clock, ck = payloads[b]
        fut_r, _codes = tracker.update((ck, b, "future"), [key], clock, [float(size)], disk_ceiling)
        rate = float(fut_r[0])
        if rate == rate:
            did = disk_ids.setdefault((b, path), len(disk_ids))
            for name in BEHAVIOURS:
                if did >= len(beh_a[name]):
                    beh_a[name] = np.concatenate([beh_a[name], np.zeros(did + 1 - len(beh_a[name]))])
            beh_a["migration_write"][did] += rate
            src = dirs.get((b, *key))
            if src is not None and (b, src) in disk_ids:
                beh_a["migration_read"][disk_ids[(b, src)]] += rate
            copies.append(CopyInFlight("intra_broker", key[0], key[1], (b, src) if src is not None else None,
                                       (b, path), rate))
            migration[pidx[key]] += rate
    beh: dict[DiskKey, Behaviours] = {}
    for did, dk in enumerate(disk_ids):
        beh[dk] = Behaviours(**{name: float(beh_a[name][did]) for name in BEHAVIOURS})
    return BehaviourRound(beh, copies, lagging, migration)
