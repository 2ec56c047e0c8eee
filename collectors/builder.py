"""The load model: admin state + scraped metrics of one round -> a ``guardian.snapshot/v1`` snapshot.

Goal: :class:`LoadModel` keeps what must survive between rounds — the last good sample of every
counter (rates need two), last known values (held for at most ``hold_s`` when a source fails),
the history windows and the broker/log-dir facts (so a dead broker can still be described) — and
turns each round into a :class:`Collected`: the frozen snapshot, its
:class:`~collectors.completeness.Coverage`, the six-behaviour split of every disk and
per-partition detail.

Method: :meth:`LoadModel.build` is a short sequence of named stages, each a function of
:mod:`collectors.build` over the round's numpy arrays and the long-lived records it is handed
explicitly (:mod:`collectors.build.state`): payloads -> brokers, known brokers, disks, partition
and topic counters, consumer positions, residence times, bytes-in/out methods, disk reads,
replica layout and behaviours, brokers and disks, history windows, topics, coverage. Sources of
each figure (first available wins; the method is counted in the coverage) are described in the
stage modules and in ``collectors/README.md``.

Guarantee: no I/O; never raises on bad metric values (they are dropped and counted with a
reason). Cost: O(samples + replicas) per round with the per-sample work in numpy (one dict lookup
per sample only where a broker's label list changed; bincounts for per-disk sums): about 1.4 CPU
seconds for 1,000 brokers × 12 disks and 100,000 partitions (RF 3).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Hashable
from datetime import UTC, datetime

from collectors.build import assemble, behaviours, disks, methods, partition_rates, reads, share, topology, windows
from collectors.build.names import PLACEHOLDER_DIR, WANTED_METRICS
from collectors.build.records import Collected, CopyInFlight, ModelConfig, PartitionDetail, PartitionDetails
from collectors.build.series import SeriesIndex
from collectors.build.state import BrokerBook, DiskBook, GroupBook, Holds, PartHold
from collectors.completeness import Coverage
from collectors.history import RingWindow
from collectors.rates import DropLog, VectorCounterTracker
from collectors.scraped import RoundResult
from domain import ClusterSnapshot
from kafkaio.endpoints import ClusterEndpoints
from kafkaio.types import KafkaState

__all__ = ["PLACEHOLDER_DIR", "WANTED_METRICS", "Collected", "CopyInFlight", "LoadModel", "ModelConfig",
           "PartitionDetail"]


class LoadModel:
    """Turns rounds of (admin state, scrapes) into snapshots; keeps rates, holds and windows."""

    def __init__(self, endpoints: ClusterEndpoints, config: ModelConfig | None = None) -> None:
        self.endpoints = endpoints
        self.config = config or ModelConfig()
        self.cfg = self.config
        self.rates = VectorCounterTracker(self.cfg.min_elapsed_s)
        self.counters = self.rates  # backwards-compatible name
        self.holds = Holds(self.cfg.hold_s)
        self.phold = PartHold()
        self.series = SeriesIndex(self.phold)
        self.brokers = BrokerBook(endpoints)
        self.disks = DiskBook()
        self.groups = GroupBook()
        self.disk_window = RingWindow(self.cfg.history_capacity)
        p_cap = max(1, self.cfg.history_capacity // self.cfg.partition_history_every)
        self.partition_windows = {name: RingWindow(p_cap, 1024, every=self.cfg.partition_history_every)
                                  for name in self.cfg.partition_history}
        self.rounds = 0

    @property
    def unknown_dir_brokers(self) -> set[int]:
        """Brokers with replicas whose log dir no listing named last round."""
        return self.disks.unknown_dir_brokers

    @property
    def unknown_dirs_last_round(self) -> int:
        """Replicas without a known log dir in the last round."""
        return self.disks.unknown_dirs_last_round

    def memory_bytes(self) -> dict[str, int]:
        """Bytes held by the history windows and the rate state (approximate)."""
        win = self.disk_window.nbytes + sum(w.nbytes for w in self.partition_windows.values())
        state = self.rates.nbytes() + 16 * self.phold.cap * max(len(self.phold.vals), 1) \
            + 150 * (len(self.disks.dirs) + len(self.series.tp_cache) + len(self.phold.registry))
        return {"windows": win, "rate_state": state, "total": win + state}

    def build(self, state: KafkaState, scrape: RoundResult, now: float | None = None) -> Collected:
        """Build one round's snapshot. Never raises on bad metric values (they are dropped)."""
        was = gc.isenabled()
        gc.disable()  # millions of live objects: a cyclic collection mid-build costs more than the build
        try:
            return self._build(state, scrape, time.time() if now is None else now)
        finally:
            if was:
                gc.enable()

    def _build(self, state: KafkaState, scrape: RoundResult, now: float) -> Collected:
        t_start = time.perf_counter()
        cfg, tracker, holds, phold, series = self.cfg, self.rates, self.holds, self.phold, self.series
        drops = DropLog()
        cov = Coverage(cluster=self.endpoints.cluster, taken_at=now)
        cov.kafka_errors = dict(state.errors)
        cov.offline_log_dirs, cov.offline_replicas = state.offline_log_dirs(), state.offline_replicas()

        src = topology.map_payloads(scrape, self.brokers, self.endpoints.exporter_urls, cfg.use_sample_timestamps,
                                    cov)
        alive, known = topology.known_brokers(state, self.brokers, cov)
        disks.refresh_log_dirs(state, self.disks, cfg, self.endpoints.hardware)
        disk_round = disks.disk_rates(src.brokers, tracker, self.disks, cfg, drops)
        ix = partition_rates.index_partitions(state, phold)
        pc = partition_rates.partition_counters(ix, src.brokers, tracker, series, phold, drops, cfg.limits)
        tc = partition_rates.topic_counters(src.brokers, tracker, series, holds, now, drops, cfg.limits)
        pos = reads.consumer_positions(src, ix, pc.leo_lead_val, tracker, series, state, self.groups, now, cfg.hold_s,
                                       cov, cfg.limits)
        residence_b = reads.residence_times(disk_round, alive, holds, now)
        fin = methods.bytes_in(ix, pc, tc, phold, now, cfg.hold_s)
        b_out, m_out = methods.bytes_out(ix, tc, fin, pos.group_rate, series.topic_reg, phold, now, cfg.hold_s)
        rd = reads.disk_reads(ix, fin.leo, fin.msgs, b_out, fin.bpm, pos, residence_b, phold, now, cfg.hold_s,
                              pc.lso_lead_val)
        lay = behaviours.replica_layout(ix, state, alive, self.disks, cfg, cov)
        beh = behaviours.split_behaviours(ix, lay, pc, fin, rd, state, src.brokers, tracker, self.disks.dirs,
                                          cfg.limits.ceiling("disk"))
        br = assemble.assemble_brokers(known, alive, state, src.brokers, disk_round, beh.behaviours, self.brokers,
                                       self.disks, holds, cfg, now, cov, self.endpoints)
        windows.record_round(self.disk_window, self.partition_windows, br.disk_util, ix.keys,
                             {"bytes_in": fin.b_in, "disk_read": rd.dr, "bytes_out": b_out})
        final_brokers = windows.with_load_history(br.brokers, self.disk_window, cfg.history_points)
        topics = assemble.topics(ix, lay, pc, fin, b_out, rd.dr, state, final_brokers, self.disks)
        assemble.partition_coverage(cov, ix, fin, m_out, drops, state, first_round=self.rounds == 0)

        self.rates.end_round()
        self.rounds += 1
        cov.memory = self.memory_bytes()
        snap = ClusterSnapshot(cluster=self.endpoints.cluster, taken_at=datetime.fromtimestamp(now, tz=UTC),
                               brokers=tuple(final_brokers), topics=topics, extra={"coverage": cov})
        details = PartitionDetails(ix.keys, ix.pidx, {"leo": fin.leo, "residence": rd.residence, "m_in": fin.m_in,
                                                      "m_out": m_out, "migration": beh.migration},
                                   rd.readers, beh.lagging, share.share_readers(state.share_groups, ix.pidx, fin.leo))
        return Collected(snapshot=snap, coverage=cov, behaviours=beh.behaviours, partitions=details,
                         throttles=state.throttles(), quotas=list(state.quotas), copies=beh.copies,
                         broker_configs=state.broker_configs,
                         sample_clock=max((c for _, c, _ in src.brokers.values()), default=None),
                         round_seconds={"build": time.perf_counter() - t_start})

    def history_stats(self) -> dict[str, dict[Hashable, tuple[float, float, int]]]:
        """Median/p95/samples per disk (util) and per partition series over the window."""
        out = {"disk_util": self.disk_window.stats()}
        for name, w in self.partition_windows.items():
            out[f"partition_{name}"] = w.stats()
        return out
