"""Per-broker Prometheus text exposition (what a JMX exporter + node_exporter would serve).

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

from kafkasim.model import Broker, Cluster


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(x: float) -> str:
    if x != x:  # NaN never leaves kafkasim
        return "0"
    if x == int(x) and abs(x) < 1e15:
        return str(int(x))
    return repr(float(x))


def render_broker(cl: Cluster, b: Broker, requests: dict[str, int] | None = None) -> str:
    """Prometheus text for one broker.  Requires the engine to have ticked at least once."""
    eng: Any = cl.engine
    if eng.dirty:
        eng.rebuild()
    f = eng.f
    out: list[str] = []
    add = out.append

    def head(name: str, typ: str, help_: str) -> None:
        add(f"# HELP {name} {help_}")
        add(f"# TYPE {name} {typ}")

    g = b.gidx
    add(f'kafkasim_broker_info{{cluster="{_esc(cl.name)}",broker_id="{b.id}",idc="{_esc(b.idc)}",'
        f'rack="{_esc(b.rack)}",pool="{_esc(b.pool)}"}} 1')
    add(f"kafkasim_sim_time_seconds {_num(eng.t)}")
    # per topic counters on this broker
    names = {idx: name for (cname, name), idx in eng.topic_index.items() if cname == cl.name}
    row_in, row_out, row_msgs = eng.bt_in[g], eng.bt_out[g], eng.bt_msgs[g]
    for metric, row in (("bytesin", row_in), ("bytesout", row_out), ("messagesin", row_msgs)):
        full = f"kafka_server_brokertopicmetrics_{metric}_total"
        head(full, "counter", f"BrokerTopicMetrics {metric}")
        add(f"{full} {_num(float(row.sum()))}")
        for idx, name in sorted(names.items(), key=lambda kv: kv[1]):
            if idx < len(row) and row[idx] > 0:
                add(f'{full}{{topic="{_esc(name)}"}} {_num(float(row[idx]))}')
    for metric, arr in (("replicationbytesin", eng.b_repl_in_total), ("replicationbytesout", eng.b_repl_out_total),
                        ("reassignmentbytesin", eng.b_reassign_in_total)):
        full = f"kafka_server_brokertopicmetrics_{metric}_total"
        head(full, "counter", f"BrokerTopicMetrics {metric}")
        add(f"{full} {_num(float(arr[g]))}")
    # per partition
    reps = eng.broker_replicas[g] if g < len(eng.broker_replicas) else []
    size = f["size"]
    leo = f["leo"]
    urp = 0
    leaders = 0
    pin: list[str] = []
    pout: list[str] = []
    pmsg: list[str] = []
    psize: list[str] = []
    pleo: list[str] = []
    plso: list[str] = []
    pur: list[str] = []
    for p in reps:
        lab = f'topic="{_esc(p.topic)}",partition="{p.index}"'
        s = p.slot
        have = float(size[s])
        if p.reassignment is not None and b.id in p.reassignment.adding:
            have = p.reassignment.copied.get(b.id, 0.0)
        psize.append(f"kafka_log_log_size{{{lab}}} {_num(int(have))}")
        pleo.append(f"kafka_log_log_logendoffset{{{lab}}} {_num(int(leo[s] + 0.999999))}")
        plso.append(f"kafka_log_log_logstartoffset{{{lab}}} 0")
        if p.leader == b.id:
            leaders += 1
            ur = 1 if len(p.isr) < len(p.replicas) else 0
            urp += ur
            pur.append(f"kafka_cluster_partition_underreplicated{{{lab}}} {ur}")
            pin.append(f"kafka_server_brokertopicpartitionmetrics_bytesin_total{{{lab}}} {_num(float(f['bytes_in_total'][s]))}")
            pout.append(f"kafka_server_brokertopicpartitionmetrics_bytesout_total{{{lab}}} "
                        f"{_num(float(f['bytes_out_total'][s]))}")
            pmsg.append(f"kafka_server_brokertopicpartitionmetrics_messagesin_total{{{lab}}} "
                        f"{_num(float(f['msgs_in_total'][s]))}")
    for name, typ, lines in (
            ("kafka_server_brokertopicpartitionmetrics_bytesin_total", "counter", pin),
            ("kafka_server_brokertopicpartitionmetrics_bytesout_total", "counter", pout),
            ("kafka_server_brokertopicpartitionmetrics_messagesin_total", "counter", pmsg),
            ("kafka_log_log_size", "gauge", psize), ("kafka_log_log_logendoffset", "gauge", pleo),
            ("kafka_log_log_logstartoffset", "gauge", plso),
            ("kafka_cluster_partition_underreplicated", "gauge", pur)):
        head(name, typ, name)
        out.extend(lines)
    head("kafka_server_replicamanager_underreplicatedpartitions", "gauge", "under-replicated partitions led here")
    add(f"kafka_server_replicamanager_underreplicatedpartitions {urp}")
    add(f"kafka_server_replicamanager_partitioncount {len(reps)}")
    add(f"kafka_server_replicamanager_leadercount {leaders}")
    is_ctrl = cl.controller_id() == b.id
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
    # node exporter
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
    return "\n".join(out) + "\n"
