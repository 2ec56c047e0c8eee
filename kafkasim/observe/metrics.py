"""Per-broker Prometheus text exposition, legacy layout: one endpoint with the Kafka series, the
node series and kafkasim's own facts (the default; the realistic two-exporter layout is
:mod:`kafkasim.observe.exporters`, which reuses :func:`kafka_lines` and :func:`sim_lines`).

Every broker serves ``GET /metrics`` on its own port.  Counters (``*_total``) only ever grow for
the life of the process; gauges are current values.  Names:

Kafka (JMX exporter style)
  ``kafka_server_brokertopicmetrics_bytesin_total{topic}``        counter, bytes produced to leaders
  ``kafka_server_brokertopicmetrics_bytesout_total{topic}``       counter, bytes fetched by consumers
  ``kafka_server_brokertopicmetrics_messagesin_total{topic}``     counter
  (the same three without ``topic`` label: all topics of the broker)
  ``kafka_server_brokertopicmetrics_replicationbytesin_total``    counter, follower replication in
  ``kafka_server_brokertopicmetrics_replicationbytesout_total``   counter, leader replication out
  ``kafka_server_brokertopicmetrics_reassignmentbytesin_total``   counter, reassignment copies in
  Tiered storage (KIP-405/KIP-963; only with remote storage, i.e. a :class:`kafkasim.tiering.tiered.TieredManager`;
  each per ``topic`` once first marked or recorded, and without ``topic``: all topics of the broker; marked
  and recorded on the partition's leader, see :mod:`kafkasim.tiering.tiered_metrics`):
  ``kafka_server_brokertopicmetrics_remotecopybytes_total``       counter, bytes of segments copied (COPY_FINISHED)
  ``kafka_server_brokertopicmetrics_remotecopyrequests_total``    counter, segment uploads begun
  ``kafka_server_brokertopicmetrics_remotecopyerrors_total``      counter, copy runs that failed
  ``kafka_server_brokertopicmetrics_remotefetchbytes_total``      counter, bytes fetched from remote segments
  ``kafka_server_brokertopicmetrics_remotefetchrequests_total``   counter, fetches served from remote
  ``kafka_server_brokertopicmetrics_remotefetcherrors_total``     counter, remote reads that failed
  ``kafka_server_brokertopicmetrics_remotedeleterequests_total``  counter, remote segment deletes begun
  ``kafka_server_brokertopicmetrics_remotedeleteerrors_total``    counter, deletes the remote store refused
  ``kafka_server_brokertopicmetrics_remotecopylagbytes`` / ``_remotecopylagsegments``  gauges, closed local
  segments not copied yet, recorded after each successful copy (not a live view: they keep their value
  between copies)
  ``kafka_server_brokertopicmetrics_remotedeletelagbytes`` / ``_remotedeletelagsegments``  gauges, remote
  segments past retention not deleted yet (recorded at each task run and after each delete)
  ``kafka_server_brokertopicmetrics_remotelogsizebytes``          gauge, bytes in remote storage (each task run)
  ``kafka_server_brokertopicpartitionmetrics_bytesin_total{topic,partition}``   counter (extension
  reporter: per-partition, reported by the partition's leader)
  ``kafka_server_brokertopicpartitionmetrics_bytesout_total{topic,partition}``  counter (idem)
  ``kafka_server_brokertopicpartitionmetrics_messagesin_total{topic,partition}`` counter (idem)
  ``kafka_log_log_size{topic,partition}``            gauge, bytes of this broker's replica
  ``kafka_log_log_logendoffset{topic,partition}``    gauge
  ``kafka_log_log_logstartoffset{topic,partition}``  gauge
  ``kafka_cluster_partition_underreplicated{topic,partition}``  gauge 0/1 (leader replicas)
  ``kafka_server_replicamanager_underreplicatedpartitions``     gauge
  ``kafka_server_replicamanager_partitioncount`` / ``_leadercount``  gauges
  ``kafka_controller_kafkacontroller_activecontrollercount``      gauge
  ``kafka_controller_kafkacontroller_offlinepartitionscount``     gauge (controller only)
  ``kafka_network_requestmetrics_totaltimems{request,quantile}``  gauge, ms (Produce, FetchConsumer)
  ``kafka_network_requestmetrics_requests_total{request}``        counter of wire requests served
  ``kafka_consumergroup_lag{consumergroup,topic,partition}``      gauge, messages (kafka_exporter style;
  only lagging consumers, on the leader's endpoint; the group is named as kafkasim.broker.groups names it)

node_exporter style (``device`` is the block device of a log dir)
  ``node_disk_io_time_seconds_total{device}``   counter (rate = util, the busy fraction)
  ``node_disk_read_bytes_total{device}`` / ``node_disk_written_bytes_total{device}``
  ``node_disk_reads_completed_total`` / ``node_disk_writes_completed_total``
  ``node_disk_read_time_seconds_total`` / ``node_disk_write_time_seconds_total``
  (await ms = Δ(read+write time) / Δ(reads+writes) × 1000)
  ``node_filesystem_size_bytes{device,mountpoint}`` / ``node_filesystem_avail_bytes{device,mountpoint}``
  ``node_memory_MemTotal_bytes`` / ``node_memory_MemAvailable_bytes`` / ``node_memory_Cached_bytes``

Device → log-dir mapping and static facts
  ``kafkasim_log_dir_info{device,log_dir,kind} 1``  (also: the filesystem metrics' ``mountpoint``)
  ``kafkasim_disk_max_bytes_per_second{device}``    gauge, the disk's throughput ceiling
  ``kafkasim_broker_info{cluster,broker_id,idc,rack,pool} 1``
  ``kafkasim_sim_time_seconds``                     gauge, simulated wall clock
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kafkasim.broker.groups import group_base
from kafkasim.cluster.model import Broker, Cluster


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(x: float) -> str:
    if x != x:  # NaN never leaves kafkasim
        return "0"
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return repr(float(x))


_PARTITION_SERIES = ("kafka_server_brokertopicpartitionmetrics_bytesin_total",
                     "kafka_server_brokertopicpartitionmetrics_bytesout_total",
                     "kafka_server_brokertopicpartitionmetrics_messagesin_total", "kafka_log_log_size",
                     "kafka_log_log_logendoffset", "kafka_log_log_logstartoffset",
                     "kafka_cluster_partition_underreplicated")


class _Static:
    """A broker's per-replica label strings and series prefixes, valid while its replica list is."""

    __slots__ = ("labels", "prefixes", "reps", "slots")

    def __init__(self, reps: list[Any]) -> None:
        self.reps = reps
        self.labels = [f'topic="{_esc(p.topic)}",partition="{p.index}"' for p in reps]
        self.slots = np.fromiter((p.slot for p in reps), dtype=np.int64, count=len(reps))
        self.prefixes = {name: [f"{name}{{{lab}}} " for lab in self.labels] for name in _PARTITION_SERIES}


def _static(eng: Any, b: Broker, reps: list[Any]) -> _Static:
    """The cached :class:`_Static` of ``b`` (rebuilt when the engine rebuilt its replica lists; a
    partition keeps its slot for life)."""
    cache: dict[int, _Static] = eng.__dict__.setdefault("_render_static", {})
    st = cache.get(b.gidx)
    if st is None or st.reps is not reps or len(st.slots) != len(reps):
        st = cache[b.gidx] = _Static(reps)
    return st


_TOPIC_METRICS = ("bytesin", "bytesout", "messagesin")


def _topics(eng: Any, cluster: str) -> tuple[dict[str, list[str]], Any]:
    """(per metric, the sample prefix of every topic; topic indexes) of the cluster's topics within
    the per-topic counter arrays (cached while the topic set is unchanged)."""
    names = eng.cluster_topics(cluster)
    cache: dict[str, tuple[Any, int, dict[str, list[str]], Any]] = eng.__dict__.setdefault("_render_topics", {})
    got = cache.get(cluster)
    width = eng.bt_in.shape[1]
    if got is None or got[0] is not names or got[1] != width:
        kept = [(i, n) for i, n in names if i < width]
        pref = {m: [f'kafka_server_brokertopicmetrics_{m}_total{{topic="{n}"}} ' for _, n in kept]
                for m in _TOPIC_METRICS}
        got = cache[cluster] = (names, width, pref, np.asarray([i for i, _ in kept], dtype=np.int64))
    return got[2], got[3]


def _controller(cl: Cluster) -> int:
    """Lowest alive broker id (-1 when none), without sorting every broker on every render."""
    eng: Any = cl.engine
    cache: dict[str, tuple[int, list[Broker]]] = eng.__dict__.setdefault("_render_brokers", {})
    got = cache.get(cl.name)
    if got is None or got[0] != len(cl.brokers):
        got = cache[cl.name] = (len(cl.brokers), [x for _, x in sorted(cl.brokers.items())])
    return next((x.id for x in got[1] if x.alive), -1)


def render_broker(cl: Cluster, b: Broker, requests: dict[str, int] | None = None) -> str:
    """Prometheus text for one broker.  Requires the engine to have ticked at least once."""
    eng: Any = cl.engine
    if eng.dirty:
        eng.rebuild()
    out: list[str] = []
    add = out.append
    add(f'kafkasim_broker_info{{cluster="{_esc(cl.name)}",broker_id="{b.id}",idc="{_esc(b.idc)}",'
        f'rack="{_esc(b.rack)}",pool="{_esc(b.pool)}"}} 1')
    add(f"kafkasim_sim_time_seconds {_num(eng.t)}")
    kafka_lines(out, cl, b, requests, extensions=True)
    _node_lines(out, cl, b)
    return "\n".join(out) + "\n"


def sim_lines(out: list[str], cl: Cluster, b: Broker) -> None:
    """The ``kafkasim_*`` series (broker facts, log-dir facts, disk ceilings, sim clock) into ``out``."""
    eng: Any = cl.engine
    out.append(f'kafkasim_broker_info{{cluster="{_esc(cl.name)}",broker_id="{b.id}",idc="{_esc(b.idc)}",'
               f'rack="{_esc(b.rack)}",pool="{_esc(b.pool)}"}} 1')
    out.append(f"kafkasim_sim_time_seconds {_num(eng.t)}")
    for d in b.disks:
        out.append(f'kafkasim_log_dir_info{{device="{d.device}",log_dir="{_esc(d.path)}",kind="{d.kind}"}} 1')
    for d in b.disks:
        out.append(f'kafkasim_disk_max_bytes_per_second{{device="{d.device}"}} {_num(d.max_bytes_per_s)}')


def kafka_lines(out: list[str], cl: Cluster, b: Broker, requests: dict[str, int] | None, *,
                extensions: bool) -> None:
    """The Kafka (JMX exporter style) series of ``b`` into ``out``; ``extensions`` adds the per-partition
    ``brokertopicpartitionmetrics`` reporter and ``kafka_consumergroup_lag``, which stock brokers lack."""
    eng: Any = cl.engine
    f = eng.f
    add = out.append

    def head(name: str, typ: str, help_: str) -> None:
        add(f"# HELP {name} {help_}")
        add(f"# TYPE {name} {typ}")

    g = b.gidx
    # per topic counters on this broker (topics it has counted bytes for)
    tpref, tix = _topics(eng, cl.name)
    for metric, counts in zip(_TOPIC_METRICS, (eng.bt_in, eng.bt_out, eng.bt_msgs), strict=True):
        full = f"kafka_server_brokertopicmetrics_{metric}_total"
        row = counts[g]
        head(full, "counter", f"BrokerTopicMetrics {metric}")
        add(f"{full} {_num(float(row.sum()))}")
        if len(tix):
            vals = row[tix]
            nz = np.flatnonzero(vals > 0)
            pre = tpref[metric]
            out.extend(map(str.__add__, [pre[j] for j in nz.tolist()], map(repr, vals[nz].tolist())))
    for metric, arr in (("replicationbytesin", eng.b_repl_in_total), ("replicationbytesout", eng.b_repl_out_total),
                        ("reassignmentbytesin", eng.b_reassign_in_total)):
        full = f"kafka_server_brokertopicmetrics_{metric}_total"
        head(full, "counter", f"BrokerTopicMetrics {metric}")
        add(f"{full} {_num(float(arr[g]))}")
    tiered = getattr(eng, "tiered_metrics", None)  # kafkasim.tiering.tiered_metrics.TieredMetrics: remote storage on
    if tiered is not None:
        tiered.lines(out, cl.name, b.id)
    # per partition (vectorised over this broker's replicas; label strings built once per layout)
    reps = eng.broker_replicas[g] if g < len(eng.broker_replicas) else []
    st = _static(eng, b, reps)
    labels, slots, pref = st.labels, st.slots, st.prefixes
    sizes = f["size"][slots].copy()
    for k, p in enumerate(reps):
        if p.reassignment is not None and b.id in p.reassignment.adding:
            sizes[k] = p.reassignment.copied.get(b.id, 0.0)
        elif p.catchup and b.id in p.catchup:
            sizes[k] = max(sizes[k] - p.catchup[b.id], 0.0)
    leos = np.ceil(f["leo"][slots] - 1e-9).astype(np.int64).tolist()
    sizes_l = sizes.astype(np.int64).tolist()
    bid = b.id
    lead_k = [k for k, p in enumerate(reps) if p.leader == bid]
    lead_slots = slots[lead_k]
    urs = [1 if len(reps[k].isr) < len(reps[k].replicas) else 0 for k in lead_k]
    urp = sum(urs)
    leaders = len(lead_k)
    series = (
        ("kafka_server_brokertopicpartitionmetrics_bytesin_total", "counter",
         lead_k, f["bytes_in_total"][lead_slots].tolist()),
        ("kafka_server_brokertopicpartitionmetrics_bytesout_total", "counter",
         lead_k, f["bytes_out_total"][lead_slots].tolist()),
        ("kafka_server_brokertopicpartitionmetrics_messagesin_total", "counter",
         lead_k, f["msgs_in_total"][lead_slots].tolist()),
        ("kafka_log_log_size", "gauge", None, sizes_l),
        ("kafka_log_log_logendoffset", "gauge", None, leos),
        ("kafka_log_log_logstartoffset", "gauge", None, f["lso"][slots].astype(np.int64).tolist()),
        ("kafka_cluster_partition_underreplicated", "gauge", lead_k, urs),
    )
    for name, typ, ks, vals in series:
        if not extensions and name.startswith("kafka_server_brokertopicpartitionmetrics_"):
            continue
        head(name, typ, name)
        pre = pref[name]
        if ks is not None:
            pre = [pre[k] for k in ks]
        out.extend(map(str.__add__, pre, map(repr, vals)))
    lag = f["lag"]
    if extensions:
        head("kafka_consumergroup_lag", "gauge", "consumer group lag in messages (kafka_exporter style)")
    for k in lead_k if extensions else ():
        p = reps[k]
        if lag[p.slot] > 0:
            group = group_base(eng.clients[int(eng.i["cons_client"][p.slot])].client_id, p.topic)
            add(f'kafka_consumergroup_lag{{consumergroup="{_esc(group)}",{labels[k]}}} '
                f'{int(lag[p.slot] / max(float(f["msg_size"][p.slot]), 1.0))}')
    head("kafka_server_replicamanager_underreplicatedpartitions", "gauge", "under-replicated partitions led here")
    add(f"kafka_server_replicamanager_underreplicatedpartitions {urp}")
    add(f"kafka_server_replicamanager_partitioncount {len(reps)}")
    add(f"kafka_server_replicamanager_leadercount {leaders}")
    is_ctrl = _controller(cl) == b.id
    add(f"kafka_controller_kafkacontroller_activecontrollercount {1 if is_ctrl else 0}")
    if is_ctrl:
        offline = sum(1 for t in cl.topics.values() for p in t.partitions if p.leader < 0)
        add(f"kafka_controller_kafkacontroller_offlinepartitionscount {offline}")
    head("kafka_network_requestmetrics_totaltimems", "gauge", "request total time (ms)")
    pl = float(eng.b_produce_lat[g]) if g < len(eng.b_produce_lat) else 0.5
    fl = float(eng.b_fetch_lat[g]) if g < len(eng.b_fetch_lat) else 0.3
    for req, val in (("Produce", pl), ("FetchConsumer", fl)):
        add(f'kafka_network_requestmetrics_totaltimems{{request="{req}",quantile="0.50"}} {val:.3f}')
        add(f'kafka_network_requestmetrics_totaltimems{{request="{req}",quantile="0.99"}} {val * 3:.3f}')
    head("kafka_network_requestmetrics_requests_total", "counter", "wire requests served")
    for req, cnt in sorted((requests or {}).items()):
        add(f'kafka_network_requestmetrics_requests_total{{request="{_esc(req)}"}} {cnt}')


def _node_lines(out: list[str], cl: Cluster, b: Broker) -> None:
    """The legacy node_exporter-style series (one ``sdX`` per log dir) and the ``kafkasim_*`` disk facts."""
    eng: Any = cl.engine
    add = out.append

    def head(name: str, typ: str, help_: str) -> None:
        add(f"# HELP {name} {help_}")
        add(f"# TYPE {name} {typ}")

    g = b.gidx
    disk_metrics = (
        ("node_disk_io_time_seconds_total", eng.d_io_time_total),
        ("node_disk_read_bytes_total", eng.d_read_total),
        ("node_disk_written_bytes_total", eng.d_written_total),
        ("node_disk_reads_completed_total", eng.d_reads_total),
        ("node_disk_writes_completed_total", eng.d_writes_total),
        ("node_disk_read_time_seconds_total", eng.d_read_time_total),
        ("node_disk_write_time_seconds_total", eng.d_write_time_total),
    )
    for name, arr in disk_metrics:
        head(name, "counter", name)
        for d in b.disks:
            add(f'{name}{{device="{d.device}"}} {_num(float(arr[d.gidx]))}')
    head("node_filesystem_size_bytes", "gauge", "filesystem size")
    for d in b.disks:
        add(f'node_filesystem_size_bytes{{device="/dev/{d.device}",mountpoint="{_esc(d.path)}"}} '
            f"{_num(d.capacity_bytes)}")
    head("node_filesystem_avail_bytes", "gauge", "filesystem free space")
    for d in b.disks:
        avail = max(d.capacity_bytes - float(eng.d_used[d.gidx]), 0.0)
        add(f'node_filesystem_avail_bytes{{device="/dev/{d.device}",mountpoint="{_esc(d.path)}"}} {_num(int(avail))}')
    head("kafkasim_log_dir_info", "gauge", "maps a block device to a Kafka log dir")
    for d in b.disks:
        add(f'kafkasim_log_dir_info{{device="{d.device}",log_dir="{_esc(d.path)}",kind="{d.kind}"}} 1')
    head("kafkasim_disk_max_bytes_per_second", "gauge", "disk throughput ceiling")
    for d in b.disks:
        add(f'kafkasim_disk_max_bytes_per_second{{device="{d.device}"}} {_num(d.max_bytes_per_s)}')
    cached = float(eng.b_cached[g]) if g < len(eng.b_cached) else 0.0
    heap = b.memory_bytes * 0.15
    add(f"node_memory_MemTotal_bytes {_num(b.memory_bytes)}")
    add(f"node_memory_MemAvailable_bytes {_num(int(max(b.memory_bytes - heap, 0.0)))}")
    add(f"node_memory_Cached_bytes {_num(int(cached))}")
    add(f"node_memory_MemFree_bytes {_num(int(max(b.memory_bytes - heap - cached, 0.0)))}")
