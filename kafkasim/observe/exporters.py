"""Goal: the two exporters a real Kafka host runs — a JMX exporter and a node_exporter — per broker.

Method: :func:`render_jmx` writes the Kafka series under the names the common jmx_exporter Kafka
rules (``lowercaseOutputName: true``; ``kafka.<domain><type=T, name=NPerSec, k=v><>Count`` →
``kafka_<domain>_<t>_<n>_total{k}``, ``...><>Value`` → ``kafka_<domain>_<t>_<n>{k}``) produce from a
stock broker's MBeans: ``kafka_server_brokertopicmetrics_{bytesin,bytesout,messagesin}_total{topic}``,
``..._replicationbytes{in,out}_total``, ``..._reassignmentbytesin_total``, ``kafka_log_log_size`` /
``_logendoffset`` / ``_logstartoffset{topic,partition}``, ``kafka_cluster_partition_underreplicated``,
``kafka_server_replicamanager_*``, ``kafka_controller_kafkacontroller_*``,
``kafka_network_requestmetrics_totaltimems{request,quantile}`` and ``_requests_total{request}``,
``kafka_log_logmanager_logdirectoryoffline{logdirectory}``, and with remote storage the tiered-storage
meters and gauges ``kafka_server_brokertopicmetrics_remote{copy,fetch}bytes_total``,
``..._remote{copy,fetch,delete}{requests,errors}_total``, ``..._remote{copy,delete}lag{bytes,segments}``,
``..._remotelogsizebytes`` (per ``topic`` and over all; :mod:`kafkasim.tiering.tiered_metrics`).
Nothing else: no per-partition byte counters (stock brokers have none — per-partition rates are
Δ``logendoffset`` × the topic's bytes per message), no consumer lag (that is Kafka's admin API or a
kafka_exporter), no ``kafkasim_*`` series unless ``sim_series`` is asked for (tests of the simulator itself).

:func:`render_node` writes what node_exporter shows on such a host (:func:`host_layout`): a root
disk ``sda`` (``/dev/sda1`` on ``/``), one block device per log dir (``sdb``, ``sdc``… or
``nvme0n1``…), and — as on LVM hosts — some log dirs on logical volumes: their filesystem is
``/dev/mapper/vg_dataN-kafka`` in ``node_filesystem_*{device,fstype,mountpoint}`` while the I/O is
counted under ``dm-K`` (and under the physical volume) in ``node_disk_*{device}``;
``node_disk_device_mapper_info{device="dm-K",name,vg_name,lv_name}`` links the two, as
node_exporter ≥ 1.5 reports from udev. Also ``node_disk_ata_rotation_rate_rpm`` (SATA disks),
``node_memory_*``, ``node_network_{receive,transmit}_bytes_total{device}``, ``node_time_seconds``.

Every sample carries the simulated time as its exposition-format timestamp (milliseconds), since
kafkasim's clock runs faster than the wall clock.

Guarantee: same physics as the legacy single endpoint (:func:`kafkasim.observe.metrics.render_broker`) —
counters equal, gauges equal — only the names, devices and labels of a real host.

Cost: O(replicas of the broker + topics) per JMX scrape, O(log dirs) per node scrape.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from kafkasim.broker.httpd import BasicAuth
from kafkasim.broker.tls import TlsMaterial
from kafkasim.cluster.model import Broker, Cluster, Disk
from kafkasim.observe.metrics import _esc, _num, kafka_lines, sim_lines

OS_DISK = "sda"
HDD_RPM = 7200


@dataclass
class MetricsConfig:
    """How brokers expose metrics.

    ``realistic`` True (the default): a JMX exporter and a node_exporter per broker on two ports, stock
    names only (``sim_series`` adds the ``kafkasim_*`` series, for tests of the simulator itself);
    False: the legacy single ``/metrics`` endpoint per broker (Kafka + node series and the
    ``kafkasim_*`` facts, see :mod:`kafkasim.observe.metrics`).  ``tls`` serves https with the CA's server
    certificate; ``auth`` requires basic auth.
    """

    realistic: bool = True
    sim_series: bool = False
    tls: TlsMaterial | None = None
    auth: BasicAuth | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        """The endpoint kinds every broker serves."""
        return ("jmx", "node") if self.realistic else ("metrics",)

    @property
    def scheme(self) -> str:
        """``https`` with TLS, else ``http``."""
        return "https" if self.tls is not None else "http"


@dataclass(frozen=True)
class HostDisk:
    """A log dir as the host shows it: its block device, its LVM volume (if any), its filesystem device."""

    disk: Disk
    block: str
    dm: str | None
    vg: str | None
    lv: str | None

    @property
    def fs_device(self) -> str:
        """The ``device`` label of the log dir's filesystem."""
        return f"/dev/mapper/{self.vg}-{self.lv}" if self.dm else f"/dev/{self.block}"

    @property
    def io_devices(self) -> tuple[str, ...]:
        """``node_disk`` devices counting this log dir's I/O (the volume and its physical disk)."""
        return (self.dm, self.block) if self.dm else (self.block,)


def host_layout(b: Broker) -> list[HostDisk]:
    """The log dirs of ``b`` on block devices: NVMe disks are ``nvmeKn1``; the others ``sdb``, ``sdc``…
    and those with (broker id + log-dir index) even sit on an LVM volume ``vg_<dir>-kafka`` (``dm-K``)."""
    out: list[HostDisk] = []
    sd = nvme = dm = 0
    for i, d in enumerate(b.disks):
        if d.kind == "nvme":
            out.append(HostDisk(d, f"nvme{nvme}n1", None, None, None))
            nvme += 1
            continue
        sd += 1
        block = "sd" + chr(ord("a") + sd % 26) if sd < 26 else f"sd{chr(96 + sd // 26)}{chr(97 + sd % 26)}"
        if (b.id + i) % 2 == 0:
            vg = "vg_" + (d.path.strip("/").replace("/", "_").replace("-", "_") or "data")
            out.append(HostDisk(d, block, f"dm-{dm}", vg, "kafka"))
            dm += 1
        else:
            out.append(HostDisk(d, block, None, None, None))
    return out


def with_timestamps(lines: list[str], t_seconds: float) -> str:
    """Exposition text of ``lines`` with ``t_seconds`` (ms) appended to every sample line."""
    suffix = f" {int(t_seconds * 1000)}\n"
    return "".join(ln + ("\n" if ln.startswith("#") else suffix) for ln in lines if ln)


def render_jmx(cl: Cluster, b: Broker, requests: dict[str, int] | None = None, sim_series: bool = False) -> str:
    """The JMX exporter endpoint of ``b`` (stock names only unless ``sim_series``)."""
    eng: Any = cl.engine
    if eng.dirty:
        eng.rebuild()
    out: list[str] = []
    kafka_lines(out, cl, b, requests, extensions=False)
    add = out.append
    add("# HELP kafka_log_logmanager_offlinelogdirectorycount LogManager OfflineLogDirectoryCount")
    add("# TYPE kafka_log_logmanager_offlinelogdirectorycount gauge")
    add(f"kafka_log_logmanager_offlinelogdirectorycount {sum(1 for d in b.disks if d.offline)}")
    add("# HELP kafka_log_logmanager_logdirectoryoffline LogManager LogDirectoryOffline")
    add("# TYPE kafka_log_logmanager_logdirectoryoffline gauge")
    for d in b.disks:
        add(f'kafka_log_logmanager_logdirectoryoffline{{logdirectory="{_esc(d.path)}"}} {1 if d.offline else 0}')
    add("# TYPE kafka_server_kafkaserver_brokerstate gauge")
    add("kafka_server_kafkaserver_brokerstate 3")
    add("# TYPE jmx_scrape_error gauge")
    add("jmx_scrape_error 0")
    if sim_series:
        sim_lines(out, cl, b)
    return with_timestamps(out, eng.t)


_DISK_FAMILIES = (
    ("node_disk_io_time_seconds_total", "d_io_time_total", "Total seconds spent doing I/Os."),
    ("node_disk_read_bytes_total", "d_read_total", "The total number of bytes read successfully."),
    ("node_disk_written_bytes_total", "d_written_total", "The total number of bytes written successfully."),
    ("node_disk_reads_completed_total", "d_reads_total", "The total number of reads completed successfully."),
    ("node_disk_writes_completed_total", "d_writes_total", "The total number of writes completed successfully."),
    ("node_disk_read_time_seconds_total", "d_read_time_total", "The total number of seconds spent by all reads."),
    ("node_disk_write_time_seconds_total", "d_write_time_total",
     "This is the total number of seconds spent by all writes."),
)
# the root disk's own light load (journald, the broker's application logs): per simulated second
_OS_RATES = {"d_io_time_total": 0.002, "d_read_total": 4096.0, "d_written_total": 65536.0, "d_reads_total": 1.0,
             "d_writes_total": 8.0, "d_read_time_total": 0.0005, "d_write_time_total": 0.004}
OS_DISK_BYTES = 100e9


def render_node(cl: Cluster, b: Broker, sim_series: bool = False) -> str:
    """The node_exporter endpoint of ``b``'s host."""
    eng: Any = cl.engine
    if eng.dirty:
        eng.rebuild()
    t = float(eng.t)
    out: list[str] = []
    add = out.append

    def head(name: str, typ: str, help_: str) -> None:
        add(f"# HELP {name} {help_}")
        add(f"# TYPE {name} {typ}")

    layout = host_layout(b)
    boot = float(eng.__dict__.setdefault("_host_boot_time", t))
    uptime = t - boot
    for name, attr, help_ in _DISK_FAMILIES:
        head(name, "counter", help_)
        arr = getattr(eng, attr)
        add(f'{name}{{device="{OS_DISK}"}} {_num(_OS_RATES[attr] * uptime)}')
        for hd in layout:
            text = _num(float(arr[hd.disk.gidx]))
            for dev in hd.io_devices:
                add(f'{name}{{device="{dev}"}} {text}')
    head("node_disk_info", "gauge", "Info of /sys/block/<block_device>.")
    add(f'node_disk_info{{device="{OS_DISK}",major="8",minor="0"}} 1')
    for k, hd in enumerate(layout):
        major, minor = ("259", str(k)) if hd.block.startswith("nvme") else ("8", str(16 * (k + 1)))
        add(f'node_disk_info{{device="{hd.block}",major="{major}",minor="{minor}"}} 1')
        if hd.dm:
            add(f'node_disk_info{{device="{hd.dm}",major="253",minor="{hd.dm[3:]}"}} 1')
    head("node_disk_device_mapper_info", "gauge", "Info about disk device mapper.")
    for hd in layout:
        if hd.dm:
            uuid = f"LVM-{zlib.crc32(f'{cl.name}/{b.id}/{hd.disk.path}'.encode()):08x}"
            add(f'node_disk_device_mapper_info{{device="{hd.dm}",lv_layer="",lv_name="{hd.lv}",'
                f'name="{hd.vg}-{hd.lv}",uuid="{uuid}",vg_name="{hd.vg}"}} 1')
    head("node_disk_ata_rotation_rate_rpm", "gauge", "ATA disk rotation rate in RPMs (0 for SSDs).")
    add(f'node_disk_ata_rotation_rate_rpm{{device="{OS_DISK}"}} 0')
    for hd in layout:
        if hd.block.startswith("sd"):
            add(f'node_disk_ata_rotation_rate_rpm{{device="{hd.block}"}} {HDD_RPM if hd.disk.kind == "hdd" else 0}')
    fs = [("/dev/sda1", "ext4", "/", OS_DISK_BYTES, OS_DISK_BYTES * 0.7)]
    fs += [(hd.fs_device, "xfs", hd.disk.path, hd.disk.capacity_bytes,
            max(hd.disk.capacity_bytes - float(eng.d_used[hd.disk.gidx]), 0.0)) for hd in layout]
    for name, help_ in (("node_filesystem_size_bytes", "Filesystem size in bytes."),
                        ("node_filesystem_free_bytes", "Filesystem free space in bytes."),
                        ("node_filesystem_avail_bytes", "Filesystem space available to non-root users in bytes."),
                        ("node_filesystem_readonly", "Filesystem read-only status.")):
        head(name, "gauge", help_)
        for dev, fstype, mnt, size, avail in fs:
            val = {"node_filesystem_size_bytes": size, "node_filesystem_free_bytes": avail,
                   "node_filesystem_avail_bytes": avail, "node_filesystem_readonly": 0}[name]
            add(f'{name}{{device="{dev}",fstype="{fstype}",mountpoint="{_esc(mnt)}"}} {_num(int(val))}')
    g = b.gidx
    cached = float(eng.b_cached[g]) if g < len(eng.b_cached) else 0.0
    heap = b.memory_bytes * 0.15
    for name, val in (("MemTotal", b.memory_bytes), ("MemAvailable", max(b.memory_bytes - heap, 0.0)),
                      ("Cached", cached), ("MemFree", max(b.memory_bytes - heap - cached, 0.0))):
        head(f"node_memory_{name}_bytes", "gauge", f"Memory information field {name}_bytes.")
        add(f"node_memory_{name}_bytes {_num(int(val))}")
    produced = float(eng.bt_in[g].sum()) if g < len(eng.bt_in) else 0.0
    fetched = float(eng.bt_out[g].sum()) if g < len(eng.bt_out) else 0.0
    rx = produced + float(eng.b_repl_in_total[g]) + float(eng.b_reassign_in_total[g])
    tx = fetched + float(eng.b_repl_out_total[g])
    for name, val in (("receive", rx), ("transmit", tx)):
        head(f"node_network_{name}_bytes_total", "counter", f"Network device statistic {name}_bytes.")
        add(f'node_network_{name}_bytes_total{{device="eth0"}} {_num(int(val))}')
        add(f'node_network_{name}_bytes_total{{device="lo"}} {_num(int(uptime * 1024))}')
    head("node_uname_info", "gauge", "Labeled system information as provided by the uname system call.")
    add(f'node_uname_info{{domainname="(none)",machine="x86_64",nodename="{_esc(cl.name)}-kafka-{b.id}",'
        f'release="6.1.0-kafkasim",sysname="Linux",version="#1 SMP"}} 1')
    head("node_boot_time_seconds", "gauge", "Node boot time, in unixtime.")
    add(f"node_boot_time_seconds {_num(boot)}")
    head("node_time_seconds", "gauge", "System time in seconds since epoch (1970).")
    add(f"node_time_seconds {_num(t)}")
    if sim_series:
        sim_lines(out, cl, b)
    return with_timestamps(out, t)
