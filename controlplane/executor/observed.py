"""The executor's view of a cluster's observation: live disk load and broker facts from a collection round.

Goal: the executor observes nothing of its own. In the service it reads the round the one observer per
cluster published; standalone (``guardian exec``, tests) it runs a collector of its own once per pass.
Either way the same object answers both questions the executor asks:

* :meth:`ObservedCluster.scrape` — the :class:`~collectors.disk_rates.DiskLoad` port (the interface of
  the former disk scraper): per-disk measured load of the latest round, its sample clock (a simulator's
  clock when it exports one) and per-broker network rates;
* :meth:`ObservedCluster.facts` — the :class:`~controlplane.executor.live.ClusterFacts` port: IDC, pool,
  rack, disk kind and speed per broker from the round's snapshot, with the endpoints file's
  declarations filling what the round lacks (and standing alone when there is no round).

Method: ``latest`` returns the newest :class:`~collectors.builder.Collected` (the service wires it to the
observer's round board); with ``collect`` (standalone), :meth:`ObservedCluster.scrape` first runs one
collection round — one scrape of each broker endpoint per executor pass.

Guarantee: no default disk kind, speed or IDC: what the round did not measure is absent. Cost: O(disks)
per scrape plus, standalone, one collector round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from collectors.builder import Collected
from collectors.collector import ClusterCollector
from collectors.disk_rates import DiskRate, round_disk_rates, round_network
from controlplane.executor.live import BrokerFacts, declared_facts, merged_facts, snapshot_facts
from kafkaio.endpoints import ClusterEndpoints

log = logging.getLogger("guardian.executor")


class ObservedCluster:
    """Disk load and broker facts of one cluster from its latest collection round (see the module docstring)."""

    def __init__(self, latest: Callable[[], Collected | None] | None = None,
                 declared: ClusterEndpoints | None = None, collector: ClusterCollector | None = None) -> None:
        if (latest is None) == (collector is None):
            raise ValueError("give either the observer's latest round or a collector of its own")
        self._latest = latest
        self.collector = collector
        self.declared = declared
        self._own: Collected | None = None
        self.rounds = 0
        """Collection rounds this view ran itself (standalone)."""
        self.error: str | None = None

    def latest(self) -> Collected | None:
        """The newest round (standalone: the last one this view collected)."""
        return self._latest() if self._latest is not None else self._own

    # ------------------------------------------------------------------ DiskLoad
    @property
    def clock(self) -> float | None:
        """The sample clock of the latest round (None before any)."""
        c = self.latest()
        return None if c is None else c.sample_clock

    @property
    def network(self) -> Mapping[int, tuple[float, float, float]]:
        """Per-broker (bytes in/s, bytes out/s, reassignment bytes in/s) of the latest round."""
        c = self.latest()
        return {} if c is None else round_network(c)

    def scrape(self, brokers: set[int] | None = None) -> Mapping[tuple[int, str], DiskRate]:
        """Per-disk measured load of the latest round (standalone: of a round collected now)."""
        if self.collector is not None:
            self.collect()
        c = self.latest()
        return {} if c is None else round_disk_rates(c, brokers)

    def collect(self) -> Collected | None:
        """Standalone: run one collection round now (a failed round keeps the previous one)."""
        if self.collector is None:
            return self.latest()
        try:
            self._own = self.collector.collect_once()
            self.rounds += 1
            self.error = None
        except Exception as exc:  # the pass goes on with the previous round (its clock does not move)
            self.error = f"{type(exc).__name__}: {exc}"
            log.warning("collecting %s for the executor failed: %s", self.collector.endpoints.cluster, exc)
        return self._own

    # ------------------------------------------------------------------ ClusterFacts
    def facts(self) -> Mapping[int, BrokerFacts]:
        """Per-broker facts: the latest round's, the declared ones filling gaps (standalone: collect the
        first round if none was collected yet)."""
        c = self.latest()
        if c is None and self.collector is not None and self.rounds == 0:
            c = self.collect()
        declared = declared_facts(self.declared) if self.declared is not None else {}
        return merged_facts(snapshot_facts(c.snapshot), declared) if c is not None else declared

    def close(self) -> None:
        """Close the collector this view runs itself (the observer's is not this view's to close)."""
        if self.collector is not None:
            self.collector.close()


def standalone(endpoints: ClusterEndpoints, scrape_timeout_s: float = 5.0) -> ObservedCluster:
    """A view that runs a collector of its own once per executor pass (``guardian exec``, tests)."""
    return ObservedCluster(declared=endpoints, collector=ClusterCollector(endpoints,
                                                                          scrape_timeout_s=scrape_timeout_s))

