"""Kafka's tiered-storage broker metrics (KIP-405 ``RemoteStorageMetrics``, KIP-963 lag and size gauges) in kafkasim.

Goal
    A broker with ``remote.log.storage.system.enable=true`` registers, under ``kafka.server:type=BrokerTopicMetrics``
    (per ``topic`` and without it, over all topics of the broker), meters and gauges of its remote log manager.
    kafkasim's brokers report the same ones, from what its remote log manager (:mod:`kafkasim.tiering.tiered`) really
    did, and the JMX exporter renders them as the rules of ``deploy/jmx_exporter/kafka-broker.yml`` name them:
    meter ``NPerSec`` → ``kafka_server_brokertopicmetrics_<n>_total`` (its ``Count``), gauge ``N`` →
    ``kafka_server_brokertopicmetrics_<n>`` (its ``Value``), ``n`` lowercased.

Method
    Meters (counters, only ever grow): ``RemoteCopyRequestsPerSec`` one per segment upload begun,
    ``RemoteCopyBytesPerSec`` the segment's size when its ``COPY_FINISHED`` is recorded, ``RemoteCopyErrorsPerSec``
    one per copy run that failed (not for a deposed leader's fenced job: Kafka cancels that task first);
    ``RemoteDeleteRequestsPerSec`` one per remote segment delete begun, ``RemoteDeleteErrorsPerSec`` one per
    delete the remote store refused; ``RemoteFetchRequestsPerSec`` / ``RemoteFetchBytesPerSec`` per fetch served
    from a remote segment and its bytes, ``RemoteFetchErrorsPerSec`` per remote read that failed.  Each is
    marked on the broker that did the work (the partition's leader), under the topic and over all topics.
    Gauges are recorded per partition at the moments Kafka's ``RemoteLogManager`` records them and summed per
    topic (and over topics for the broker-wide one): ``RemoteCopyLagBytes`` / ``RemoteCopyLagSegments`` after
    each successful copy (closed local segments not yet copied: ``onlyLocalLogSegmentsSize`` less the active
    segment), so between copies they keep their last value and do **not** grow while the task waits;
    ``RemoteLogSizeBytes`` at each run of the expiration (the remote segments listed), ``RemoteDeleteLagBytes`` /
    ``RemoteDeleteLagSegments`` then (segments retention wants deleted) and after each delete.  A broker that
    stops leading a partition drops that partition's gauge values (``removeRemoteCopyLagBytes`` & co.); a
    deleted topic's series go.  Per-topic series appear once first marked or recorded (Kafka registers them
    lazily); the broker-wide ones exist from the start at 0.

Guarantee
    Counters are monotonic for the life of the topic (broker-wide: of the process); every value is a sum of
    what the simulated remote log manager did or holds, nothing estimated.

Cost
    O(1) per mark or record; O(topics of the broker × 13) per scrape.
"""

from __future__ import annotations

from collections import defaultdict

from kafkasim.observe.metrics import _esc, _num

METERS = ("RemoteCopyBytes", "RemoteCopyRequests", "RemoteCopyErrors", "RemoteFetchBytes", "RemoteFetchRequests",
          "RemoteFetchErrors", "RemoteDeleteRequests", "RemoteDeleteErrors")
"""The ``<name>PerSec`` meters kafkasim reports (``BuildRemoteLogAuxState*`` are not: kafkasim has no such step)."""
GAUGES = ("RemoteCopyLagBytes", "RemoteCopyLagSegments", "RemoteDeleteLagBytes", "RemoteDeleteLagSegments",
          "RemoteLogSizeBytes")
"""The gauges kafkasim reports (``RemoteLogMetadataCount`` and ``RemoteLogSizeComputationTime`` are not)."""
PREFIX = "kafka_server_brokertopicmetrics_"


def meter_name(meter: str) -> str:
    """The Prometheus name of meter ``meter`` (without ``PerSec``) as the JMX exporter rules render it."""
    return f"{PREFIX}{meter.lower()}_total"


def gauge_name(gauge: str) -> str:
    """The Prometheus name of gauge ``gauge`` as the JMX exporter rules render it."""
    return PREFIX + gauge.lower()


Broker = tuple[str, int]


class TieredMetrics:
    """The tiered-storage meters and gauges of every broker of a federation (see the module docstring).

    Changed on the simulator's loop thread only (by :class:`kafkasim.tiering.tiered.TieredManager`), read there by the
    exporters."""

    def __init__(self) -> None:
        self.enabled: set[str] = set()
        """Clusters whose brokers run with remote storage (the only ones that register these metrics)."""
        self.meters: dict[Broker, dict[str, dict[str, float]]] = defaultdict(dict)
        """(cluster, broker) -> topic ("" = all topics) -> meter -> count."""
        self.gauges: dict[Broker, dict[str, dict[str, dict[int, float]]]] = defaultdict(dict)
        """(cluster, broker) -> topic -> gauge -> partition -> value (a topic's gauge is the sum)."""

    def mark(self, cluster: str, broker: int, topic: str, meter: str, n: float = 1.0) -> None:
        """Meter ``meter`` of ``topic`` and of all topics on the broker grows by ``n``."""
        per = self.meters[(cluster, broker)]
        for key in (topic, ""):
            counts = per.setdefault(key, {})
            counts[meter] = counts.get(meter, 0.0) + n

    def record(self, cluster: str, broker: int, topic: str, partition: int, gauge: str, value: float) -> None:
        """Gauge ``gauge`` of ``topic`` on the broker now counts ``value`` for ``partition``."""
        self.gauges[(cluster, broker)].setdefault(topic, {}).setdefault(gauge, {})[partition] = float(value)

    def remove_partition(self, cluster: str, broker: int, topic: str, partition: int) -> None:
        """The broker no longer leads the partition: its gauge values leave the topic's (the series stay)."""
        for parts in self.gauges.get((cluster, broker), {}).get(topic, {}).values():
            parts.pop(partition, None)

    def remove_topic(self, cluster: str, topic: str) -> None:
        """The topic was deleted: its series go on every broker of the cluster (the broker-wide meters stay)."""
        for (cl, _), per in list(self.meters.items()):
            if cl == cluster:
                per.pop(topic, None)
        for (cl, _), gper in list(self.gauges.items()):
            if cl == cluster:
                gper.pop(topic, None)

    def value(self, cluster: str, broker: int, name: str, topic: str = "") -> float:
        """A meter's count or a gauge's value (``topic`` "": over all topics) as the broker reports it."""
        if name in METERS:
            return self.meters.get((cluster, broker), {}).get(topic, {}).get(name, 0.0)
        gper = self.gauges.get((cluster, broker), {})
        topics = [topic] if topic else list(gper)
        return sum(sum(gper.get(t, {}).get(name, {}).values()) for t in topics)

    def lines(self, out: list[str], cluster: str, broker: int) -> None:
        """The broker's series in Prometheus text into ``out`` (nothing unless its cluster runs remote storage)."""
        if cluster not in self.enabled:
            return
        per = self.meters.get((cluster, broker), {})
        for meter in METERS:
            name = meter_name(meter)
            out.append(f"# HELP {name} BrokerTopicMetrics {meter}PerSec")
            out.append(f"# TYPE {name} counter")
            out.append(f"{name} {_num(per.get('', {}).get(meter, 0.0))}")
            for topic in sorted(t for t in per if t and meter in per[t]):
                out.append(f'{name}{{topic="{_esc(topic)}"}} {_num(per[topic][meter])}')
        gper = self.gauges.get((cluster, broker), {})
        for gauge in GAUGES:
            name = gauge_name(gauge)
            out.append(f"# HELP {name} BrokerTopicMetrics {gauge}")
            out.append(f"# TYPE {name} gauge")
            topics = {t: sum(g[gauge].values()) for t, g in gper.items() if gauge in g}
            out.append(f"{name} {_num(sum(topics.values()))}")
            for topic in sorted(topics):
                out.append(f'{name}{{topic="{_esc(topic)}"}} {_num(topics[topic])}')

