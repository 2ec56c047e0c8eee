"""Goal: ``guardian lab`` — real Apache Kafka 4.x brokers (KRaft) on loopback, set up as production brokers
are: JBOD log dirs each on its own block device, SASL_SSL/SCRAM-SHA-512 clients, mutual TLS between
nodes, ``broker.rack`` per IDC with KIP-392's rack-aware selector, the Prometheus JMX exporter agent in
every broker and node_exporter for the disks — the reference every Kafka behaviour of Guardian is
checked against.

Method: :func:`up` generates the PKI and passwords (:mod:`kafkalab.credentials`), provisions the log dirs
(:mod:`kafkalab.disks`), renders each node's files (:mod:`kafkalab.config`), formats every node's storage
with ``kafka.tools.StorageTool`` (SCRAM users added at format time, KIP-900), starts the JVMs
(``kafka.Kafka``, the agent as ``-javaagent``) and node_exporter in sessions of their own, waits until
every broker is registered and every exporter answers, and writes the endpoints document that
``guardian sim up --realistic`` writes (same shape, plus a top-level ``lab`` object saying what the lab
is: Kafka version, loop devices or plain directories and why). The first three nodes are combined
broker+controller nodes (a quorum that survives one ``kill -9``), the others brokers only. The lab's
state (ports, pids, devices, commands) is ``lab.json`` in the lab directory; :func:`down`, :func:`kill_node`,
:func:`start_node` and :func:`fail_log_dir` (a dead JBOD disk) work from it, so they work from another process.

Guarantee: :func:`up` either returns a running lab or stops what it started, releases the devices and
raises :class:`LabError` with the failing node's last log lines; :func:`down` never leaves a process, a
mount or a loop device behind (what it cannot undo is named). No secret is written outside files of mode
0600, and no password is put on a command line except StorageTool's ``--add-scram`` at format time.
Cost: ~20–40 s on two cores for four brokers (JVM start-up dominates); 512 MiB heap per node by default.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
import uuid
from base64 import b64encode
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafkalab import cgroups
from kafkalab import config as cfg
from kafkalab import credentials as creds
from kafkalab import tiered as tiered_service
from kafkalab.disks import DiskMode, LogDir, fail, provision, release
from kafkalab.errors import LabError
from kafkalab.jars import Jars, ensure_jars
from kafkalab.plugin import ensure_plugin

FORMAT = "guardian.lab/v1"
STATE_FILE = "lab.json"
DEFAULT_DIR = Path(".guardian/lab")
RULES = Path(__file__).with_name("jmx_rules.yml")  # deploy/jmx_exporter/kafka-broker.yml (a link; the wheel has a copy)
NODE_EXPORTER = "prometheus-node-exporter"
LAB_DIR_GLOB = "/data*"
RACK_REGEX = r"^(?P<idc>.+?)(?:-r\d+)?$"


@dataclass(frozen=True)
class LabSpec:
    """What ``guardian lab up`` was asked for."""

    brokers: int = 4
    log_dirs: int = 3
    idcs: int = 1
    cluster: str = "lab"
    directory: Path = DEFAULT_DIR
    disks: DiskMode = "auto"
    log_dir_bytes: int = 2 << 30
    heap: str = "512m"
    disk_kind: str = "ssd"
    disk_max_bytes_per_s: int = 200_000_000
    tiered: bool = False
    rlmm: str = "guardian"
    """With ``tiered``: ``guardian`` (Guardian's RLMM and its service) or ``kafka`` (Kafka's
    TopicBasedRemoteLogMetadataManager over the INTERNAL listener: the baseline of the bench)."""
    ready_timeout_s: float = 180.0
    extra_props: dict[str, str] = field(default_factory=dict)

    def check(self) -> None:
        if not 1 <= self.brokers <= 12:
            raise LabError(f"--brokers: {self.brokers} is out of range (1..12 on one machine)")
        if not 1 <= self.log_dirs <= 8:
            raise LabError(f"--log-dirs: {self.log_dirs} is out of range (1..8)")
        if self.rlmm not in ("guardian", "kafka"):
            raise LabError(f"--rlmm: {self.rlmm!r} is not guardian or kafka")
        if not 1 <= self.idcs <= self.brokers:
            raise LabError(f"--idcs: {self.idcs} must be between 1 and the number of brokers ({self.brokers})")


def idc_name(i: int) -> str:
    return f"idc-{chr(ord('a') + i)}"


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


# ------------------------------------------------------------------------------------------------ state
def state_path(directory: Path) -> Path:
    return directory / STATE_FILE


def load_state(directory: Path) -> dict[str, Any]:
    p = state_path(directory)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise LabError(f"no lab in {directory} ({p} does not exist): guardian lab up --dir {directory}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise LabError(f"{p} is unreadable ({exc}): remove the directory by hand after unmounting its log dirs") \
            from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise LabError(f"{p}: not a {FORMAT} state file")
    return doc


def _save_state(directory: Path, doc: dict[str, Any]) -> None:
    tmp = state_path(directory).with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(state_path(directory))


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child of ours counts as dead
    with contextlib.suppress(ChildProcessError, OSError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


# ------------------------------------------------------------------------------------------------ up
def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise LabError("java is not installed: the lab's brokers need Java 17 or newer (apt-get install "
                       "openjdk-17-jre-headless)")
    return java


def _node_cmd(java: str, jars: Jars, heap: str, node_dir: Path, jmx_port: int, extra_cp: str = "") -> list[str]:
    classpath = jars.classpath + (os.pathsep + extra_cp if extra_cp else "")
    return [java, f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={node_dir / 'log4j2.properties'}",
            f"-javaagent:{jars.agent}=127.0.0.1:{jmx_port}:{node_dir / 'jmx-exporter.yml'}",
            "-cp", classpath, "kafka.Kafka", str(node_dir / "server.properties")]


def _spawn(cmd: list[str], log: Path) -> int:
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True)
    return proc.pid


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _format_storage(java: str, jars: Jars, cluster_id: str, nodes: list[dict[str, Any]], s: creds.LabSecrets) -> None:
    scram = [f"{creds.MECHANISM}=[name={u},password={s.password(u)}]" for u in (creds.KAFKA_USER, creds.ADMIN_USER)]
    procs = []
    for n in nodes:
        cmd = [java, "-Xmx256m", "-XX:TieredStopAtLevel=1",
               f"-Dlog4j2.configurationFile={Path(n['dir']) / 'log4j2.properties'}", "-cp", jars.classpath,
               "kafka.tools.StorageTool", "format", "--cluster-id", cluster_id,
               "--config", str(Path(n["dir"]) / "server.properties"), "--ignore-formatted"]
        for entry in scram:
            cmd += ["--add-scram", entry]
        procs.append((n, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    for n, p in procs:
        out, _ = p.communicate(timeout=120)
        if p.returncode != 0:
            raise LabError(f"formatting node {n['id']}'s storage failed: {out.strip()[-800:]}")


def https_get(url: str, ca_file: Path, user: str, password: str, timeout: float = 5.0) -> str:
    """One GET of an exporter of the lab over https with basic auth (the lab's CA)."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    req = urllib.request.Request(url, headers={
        "Authorization": "Basic " + b64encode(f"{user}:{password}".encode()).decode()})
    with urllib.request.urlopen(req, context=ctx, timeout=timeout) as r:
        return str(r.read().decode())


def admin_config(doc: dict[str, Any]) -> dict[str, Any]:
    """kafka-python client settings for the lab (the ``guardian`` SCRAM user over SASL_SSL)."""
    s = creds.LabSecrets(Path(doc["dir"]))
    return {"bootstrap_servers": doc["bootstrap_servers"], "security_protocol": "SASL_SSL",
            "sasl_mechanism": creds.MECHANISM, "sasl_plain_username": creds.KAFKA_USER,
            "sasl_plain_password": s.password(creds.KAFKA_USER), "ssl_cafile": str(s.ca_file)}


THROTTLE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                 "replica.alter.log.dirs.io.max.bytes.per.second", "leader.replication.throttled.replicas",
                 "follower.replication.throttled.replicas")


def throttle_overrides(doc: dict[str, Any], topics: list[str]) -> dict[str, dict[str, str]]:
    """Every KIP-73/KIP-113 throttle override on the lab's brokers and on ``topics``, as ``kafka-configs
    --describe`` shows them (an empty-valued override counts): ``{"broker:1": {key: value}, "topic:t": ...}``;
    empty when nothing is left."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = KafkaAdminClient(client_id="guardian-lab-check", **admin_config(doc))
    try:
        res = [ConfigResource(ConfigResourceType.BROKER, str(n["id"])) for n in doc["nodes"]]
        res += [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
        out: dict[str, dict[str, str]] = {}
        for kind, by_name in admin.describe_configs(res).items():
            for name, cfg_ in by_name.items():
                left = {k: str(v.get("value")) for k, v in cfg_.items()
                        if k in THROTTLE_KEYS and v.get("value") is not None}
                if left:
                    out[f"{kind}:{name}"] = left
        return out
    finally:
        admin.close()


def create_topic(doc: dict[str, Any], name: str, assignment: dict[int, list[int]]) -> None:
    """Create ``name`` with an explicit replica assignment (partition -> brokers, first = preferred leader)."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(client_id="guardian-lab-setup", **admin_config(doc))
    try:
        admin.create_topics([NewTopic(name, replica_assignments=assignment)])
    finally:
        admin.close()


def _registered_brokers(doc: dict[str, Any]) -> set[int]:
    from kafka import KafkaAdminClient  # kafka-python: imported when a lab starts, not when the CLI does

    admin = KafkaAdminClient(client_id="guardian-lab", request_timeout_ms=8000, **admin_config(doc))
    try:
        return {int(b["broker_id"]) for b in admin.describe_cluster()["brokers"] if not b.get("is_fenced")}
    finally:
        admin.close()


def _wait_ready(doc: dict[str, Any], timeout_s: float) -> None:
    kafka_log = logging.getLogger("kafka")
    level = kafka_log.level
    kafka_log.setLevel(logging.CRITICAL)  # refused connections are expected until the brokers listen
    try:
        _poll_ready(doc, timeout_s)
    finally:
        kafka_log.setLevel(level)


def _poll_ready(doc: dict[str, Any], timeout_s: float) -> None:
    s = creds.LabSecrets(Path(doc["dir"]))
    metrics_pw = s.password(creds.METRICS_USER)
    want = {n["id"] for n in doc["nodes"]}
    deadline = time.monotonic() + timeout_s
    last = "nothing tried yet"
    while time.monotonic() < deadline:
        for n in doc["nodes"]:
            if not pid_alive(n["pid"]):
                raise LabError(f"node {n['id']} exited during start-up; its log ({n['log']}) ends:\n"
                               f"{_tail(Path(n['log']))}")
        try:
            got = _registered_brokers(doc)
            if got >= want:
                for n in doc["nodes"]:
                    https_get(n["jmx_url"], s.ca_file, creds.METRICS_USER, metrics_pw)
                https_get(doc["node_exporter"]["url"], s.ca_file, creds.METRICS_USER, metrics_pw)
                return
            last = f"brokers registered: {sorted(got)} of {sorted(want)}"
        except Exception as exc:  # not up yet: connection refused, no controller, TLS not listening
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(1.0)
    raise LabError(f"the lab was not ready within {timeout_s:.0f} s ({last})")


def up(spec: LabSpec, endpoints_file: Path | None = None) -> dict[str, Any]:
    """Start a lab as ``spec`` says; returns its state (also in ``<dir>/lab.json``)."""
    spec.check()
    directory = spec.directory.resolve()
    if state_path(directory).exists():
        old = load_state(directory)
        if any(pid_alive(n.get("pid")) for n in old["nodes"]):
            raise LabError(f"a lab is already up in {directory}: guardian lab down --dir {directory}")
        down(directory)
    java = _java()
    jars = ensure_jars()
    plugin_cp = ensure_plugin().classpath if spec.tiered else ""
    if not RULES.exists():
        raise LabError(f"{RULES} is missing: the JMX exporter's rules ship with the package (reinstall it)")
    if shutil.which(NODE_EXPORTER) is None:
        raise LabError(f"{NODE_EXPORTER} is not installed (apt-get install prometheus-node-exporter)")
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    doc: dict[str, Any] = {"format": FORMAT, "dir": str(directory), "cluster": spec.cluster,
                           "kafka_version": jars.kafka_version, "nodes": [], "node_exporter": {},
                           "disk_kind": spec.disk_kind, "disk_max_bytes_per_s": spec.disk_max_bytes_per_s}
    _save_state(directory, doc)
    try:
        _start(spec, directory, java, jars, doc, plugin_cp)
        _wait_ready(doc, spec.ready_timeout_s)
    except BaseException:
        down(directory, keep_dir=True)
        raise
    doc["endpoints"] = {}
    _rewrite_endpoints(directory, doc, endpoints_file)
    return doc


def _start(spec: LabSpec, directory: Path, java: str, jars: Jars, doc: dict[str, Any], plugin_cp: str = "") -> None:
    s = creds.generate(directory)
    n_ctrl = min(cfg.MAX_CONTROLLERS, spec.brokers)
    service = spec.tiered and spec.rlmm == "guardian"
    ports = _free_ports(spec.brokers * 4 + 1 + (4 * tiered_service.NODES if service else 0))
    tiered_props: dict[str, str] = {}
    if service:  # the metadata service first: a broker's RLMM connects to it at start-up
        state = tiered_service.start(directory, doc, ports[spec.brokers * 4 + 1:])
        _save_state(directory, doc)
        tiered_props = tiered_service.broker_properties(state, spec.cluster)
    elif spec.tiered:
        tiered_props = tiered_service.kafka_rlmm_properties(directory, s.keystore, s.ca_file, spec.brokers)
    ctrl_ports = {i + 1: ports[i * 4 + 2] for i in range(n_ctrl)}
    voters = cfg.voters(ctrl_ports)
    all_dirs = [directory / "data" / f"b{i + 1}" / f"data{d + 1}" for i in range(spec.brokers)
                for d in range(spec.log_dirs)]
    log_dirs, fallback = provision(all_dirs, directory / "images", spec.log_dir_bytes, spec.disks)
    doc["disks"] = "loop" if fallback is None else "dir"
    doc["disks_note"] = fallback
    doc["log_dirs"] = [d.to_json() for d in log_dirs]
    metrics_pw = s.password(creds.METRICS_USER)
    salt = secrets.token_hex(16)
    p12_pw = creds.read_secret(directory / "tls" / "exporter.p12.password")
    jmx_yaml = cfg.jmx_exporter_yaml(RULES.read_text(), s.exporter_p12, p12_pw, creds.METRICS_USER,
                                     creds.pbkdf2_hash(metrics_pw, salt), salt)
    per_idc: dict[str, int] = {}
    for i in range(spec.brokers):
        nid = i + 1
        node_dir = directory / f"node{nid}"
        node_dir.mkdir(parents=True, exist_ok=True)
        idc = idc_name(i % spec.idcs)
        per_idc[idc] = per_idc.get(idc, 0) + 1
        rack = f"{idc}-r{per_idc[idc]}"
        np_ = cfg.NodePorts(client=ports[i * 4], internal=ports[i * 4 + 1],
                            controller=ctrl_ports.get(nid), jmx_exporter=ports[i * 4 + 3])
        mine = tuple(d.path for d in log_dirs[i * spec.log_dirs:(i + 1) * spec.log_dirs])
        layout = cfg.NodeLayout(node_id=nid, ports=np_, log_dirs=mine, metadata_dir=node_dir / "metadata",
                                rack=rack, voters=voters, brokers=spec.brokers, keystore=s.keystore,
                                ca_file=s.ca_file)
        props = cfg.server_properties(layout) + "".join(f"{k}={v}\n" for k, v in
                                                        {**tiered_props, **spec.extra_props}.items())
        (node_dir / "server.properties").write_text(props)
        (node_dir / "log4j2.properties").write_text(cfg.log4j2_properties(node_dir / "server.log"))
        creds.write_secret(node_dir / "jmx-exporter.yml", jmx_yaml)  # holds the keystore's password
        doc["nodes"].append({
            "id": nid, "dir": str(node_dir), "rack": rack, "idc": idc, "controller": np_.controller is not None,
            "ports": {"client": np_.client, "internal": np_.internal, "controller": np_.controller,
                      "jmx_exporter": np_.jmx_exporter},
            "log_dirs": [str(p) for p in mine], "log": str(node_dir / "stdout.log"),
            "jmx_url": f"https://127.0.0.1:{np_.jmx_exporter}/metrics",
            "cmd": _node_cmd(java, jars, spec.heap, node_dir, np_.jmx_exporter, plugin_cp), "pid": None})
    doc["bootstrap_servers"] = ",".join(f"127.0.0.1:{n['ports']['client']}" for n in doc["nodes"])
    _save_state(directory, doc)
    _format_storage(java, jars, _cluster_id(), doc["nodes"], s)
    for n in doc["nodes"]:
        n["pid"] = _spawn(n["cmd"], Path(n["log"]))
    _save_state(directory, doc)
    ne_port = ports[spec.brokers * 4]
    web = directory / "node-exporter-web.yml"
    web.write_text(cfg.node_exporter_web_config(s.server_cert, s.server_key, creds.METRICS_USER,
                                                creds.bcrypt_hash(metrics_pw)))
    ne_cmd = [shutil.which(NODE_EXPORTER) or NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{ne_port}",
              f"--web.config.file={web}", "--collector.disable-defaults", "--collector.diskstats",
              "--collector.filesystem", "--collector.meminfo", "--collector.cpu", "--collector.loadavg",
              # stock node_exporter drops loop devices; the lab's log dirs are loop devices
              r"--collector.diskstats.device-exclude=^(z?ram|fd)\d+$"]
    ne_log = directory / "node-exporter.log"
    doc["node_exporter"] = {"port": ne_port, "url": f"https://127.0.0.1:{ne_port}/metrics", "cmd": ne_cmd,
                            "log": str(ne_log), "pid": _spawn(ne_cmd, ne_log)}
    _save_state(directory, doc)


def _cluster_id() -> str:
    """A KRaft cluster id: a random UUID in Kafka's URL-safe base64 without padding, never starting with "-" (as
    Kafka's ``Uuid.randomUuid``: the storage tool read such an id as an option — 1 lab start in 64 failed with
    "--cluster-id: expected one argument")."""
    from base64 import urlsafe_b64encode

    while (found := urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return found


def endpoints_document(doc: dict[str, Any]) -> dict[str, Any]:
    """The endpoints document ``guardian sim up --realistic`` writes (an operator's registration: bootstrap
    servers, security by file reference, each broker's metrics endpoints, the rack→IDC rule, the hardware
    profile), for the lab's one cluster; the request body of ``POST /api/v1/clusters`` as it is."""
    s = creds.LabSecrets(Path(doc["dir"]))
    metric = {"ca_file": str(s.ca_file), "username": creds.METRICS_USER,
              "password_file": str(s.password_file(creds.METRICS_USER))}
    brokers = [{"id": n["id"],
                "metrics": [{"kind": "jmx", "url": n["jmx_url"], **metric},
                            {"kind": "node", "url": doc["node_exporter"]["url"], **metric}]}
               for n in doc["nodes"]]
    log_dir_names = sorted({Path(p).name for n in doc["nodes"] for p in n["log_dirs"]})
    # a node whose reads are capped (guardian lab confine --read-rate) declares that ceiling for its disks
    hardware = [{"brokers": [node], "log_dirs": "*", "kind": doc["disk_kind"], "max_bytes_per_s": rate}
                for node, rate in sorted(cgroups.read_ceilings(doc).items())]
    hardware += [{"brokers": "*", "log_dirs": f"*/{name}", "kind": doc["disk_kind"],
                  "max_bytes_per_s": doc["disk_max_bytes_per_s"]} for name in log_dir_names]
    note = ("each log dir is an ext4 file system on its own loop device" if doc["disks"] == "loop"
            else f"log dirs are plain directories sharing one device ({doc['disks_note']}): disk figures "
                 "measured on this lab are the host disk's, not a log dir's")
    return {"format": "kafkasim.endpoints/v1",
            "lab": {"kafka_version": doc["kafka_version"], "disks": doc["disks"], "disks_note": note,
                    "state": str(state_path(Path(doc["dir"])))},
            "clusters": {doc["cluster"]: {
                "bootstrap_servers": doc["bootstrap_servers"],
                "security": {"protocol": "SASL_SSL", "sasl_mechanism": creds.MECHANISM,
                             "username": creds.KAFKA_USER,
                             "password_file": str(s.password_file(creds.KAFKA_USER)),
                             "ca_file": str(s.ca_file)},
                "brokers": brokers,
                "rack_to_idc": {"regex": RACK_REGEX},
                "hardware": hardware}}}


# ------------------------------------------------------------------------------------------------ down
def _stop_pid(pid: int | None, grace_s: float) -> None:
    if not pid_alive(pid):
        return
    assert pid is not None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.2)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(0.1)


def down(directory: Path, keep_dir: bool = False, grace_s: float = 15.0) -> list[str]:
    """Stop every process of the lab in ``directory``, release its devices and delete it (unless ``keep_dir``).

    Returns what could not be undone (one line each)."""
    directory = directory.resolve()
    doc = load_state(directory)
    pids = [n.get("pid") for n in doc.get("nodes", [])] + [doc.get("node_exporter", {}).get("pid")]
    for pid in pids:  # SIGTERM all first: the brokers shut down together, not one quorum member at a time
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
    for pid in pids:
        _stop_pid(pid, grace_s)
    problems = [f"process {pid} is still running" for pid in pids if pid_alive(pid)]
    if doc.get("tiered"):  # after the brokers: their RLMM writes to it until they stop
        problems += tiered_service.stop(doc["tiered"])
    problems += cgroups.release(doc)
    problems += release([LogDir.from_json(d) for d in doc.get("log_dirs", [])])
    if not keep_dir and not problems:
        shutil.rmtree(directory, ignore_errors=True)
    return problems


# ------------------------------------------------------------------------------------------------ faults
def _node(doc: dict[str, Any], node_id: int) -> dict[str, Any]:
    for n in doc["nodes"]:
        if n["id"] == node_id:
            return dict(n)
    raise LabError(f"--broker: no node {node_id} in the lab (nodes: {[n['id'] for n in doc['nodes']]})")


def kill_node(directory: Path, node_id: int, sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` (default ``kill -9``) to one node's JVM; returns its pid."""
    directory = directory.resolve()
    doc = load_state(directory)
    n = _node(doc, node_id)
    if not pid_alive(n["pid"]):
        raise LabError(f"node {node_id} is not running")
    os.kill(n["pid"], sig)
    if sig in (signal.SIGKILL, signal.SIGTERM):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and pid_alive(n["pid"]):
            time.sleep(0.1)
    return int(n["pid"])


def start_node(directory: Path, node_id: int) -> int:
    """Start a stopped node again with its original command; returns the new pid."""
    directory = directory.resolve()
    doc = load_state(directory)
    n = _node(doc, node_id)
    if pid_alive(n["pid"]):
        raise LabError(f"node {node_id} is already running (pid {n['pid']})")
    pid = _spawn(n["cmd"], Path(n["log"]))
    for m in doc["nodes"]:
        if m["id"] == node_id:
            m["pid"] = pid
    _save_state(directory, doc)
    return pid


def start_tiered_node(directory: Path, node_id: int) -> int:
    """Start a stopped node of the lab's tiered metadata service again and record its new pid in the lab's
    state, so that :func:`down` stops it too; returns the pid."""
    directory = directory.resolve()
    doc = load_state(directory)
    if not doc.get("tiered"):
        raise LabError("the lab has no tiered metadata service (start it with lab up --tiered)")
    pid = tiered_service.start_node(doc["tiered"], node_id)
    _save_state(directory, doc)
    return pid


def fail_log_dir(directory: Path, node_id: int, log_dir: str | None = None) -> str:
    """Make one log dir of node ``node_id`` fail as a dead JBOD disk does (:func:`kafkalab.disks.fail`: every I/O on
    it returns ``EIO``); ``log_dir`` defaults to the node's first. Kafka takes the dir offline at its next I/O there
    (a produce, a replica fetch, a checkpoint). Returns the dir's path; :func:`down` unmounts it as any other."""
    directory = directory.resolve()
    doc = load_state(directory)
    n = _node(doc, node_id)
    path = log_dir or n["log_dirs"][0]
    if path not in n["log_dirs"]:
        raise LabError(f"--log-dir: {path} is not a log dir of node {node_id} (its dirs: {n['log_dirs']})")
    fail(next(LogDir.from_json(d) for d in doc["log_dirs"] if d["path"] == path))
    return str(path)


def confine(directory: Path, node_id: int, memory_bytes: int | None = None, read_bytes_per_s: int | None = None,
            evict_cache: bool = False, endpoints_file: Path | None = None) -> dict[str, Any]:
    """Give node ``node_id`` a small page cache (``memory_bytes``: its JVM's memory cgroup limit) and/or disks that
    read at most ``read_bytes_per_s`` (:mod:`kafkalab.cgroups`), and/or drop its log dirs' cached pages
    (``evict_cache``). A read ceiling is declared for the node's disks in the endpoints document (the state's, and
    ``endpoints_file`` rewritten when given), so that Guardian's disk model matches the disk. Returns the state.
    Undone by :func:`unconfine` and by :func:`down`; a node restarted afterwards starts unconfined."""
    directory = directory.resolve()
    doc = load_state(directory)
    n = _node(doc, node_id)
    if not pid_alive(n["pid"]):
        raise LabError(f"node {node_id} is not running")
    if memory_bytes is not None:
        cgroups.confine_memory(doc, node_id, memory_bytes)
    if read_bytes_per_s is not None:
        cgroups.throttle_reads(doc, node_id, read_bytes_per_s)
    _save_state(directory, doc)
    if evict_cache:
        cgroups.evict([Path(p) for p in n["log_dirs"]])
    _rewrite_endpoints(directory, doc, endpoints_file)
    return doc


def unconfine(directory: Path, node_id: int, endpoints_file: Path | None = None) -> list[str]:
    """Undo :func:`confine` for one node (its JVM back in the root cgroups, its read ceiling no longer declared)."""
    directory = directory.resolve()
    doc = load_state(directory)
    _node(doc, node_id)
    problems = cgroups.release(doc, node_id)
    _save_state(directory, doc)
    _rewrite_endpoints(directory, doc, endpoints_file)
    return problems


def _rewrite_endpoints(directory: Path, doc: dict[str, Any], endpoints_file: Path | None) -> None:
    """(Re)write the endpoints document into the state and, atomically, into ``endpoints_file``."""
    if "endpoints" not in doc:
        return
    doc["endpoints"] = endpoints_document(doc)
    _save_state(directory, doc)
    if endpoints_file is not None:
        tmp = endpoints_file.with_suffix(endpoints_file.suffix + ".tmp")
        tmp.write_text(json.dumps(doc["endpoints"], indent=2, sort_keys=True) + "\n")
        tmp.replace(endpoints_file)


def status(directory: Path) -> dict[str, Any]:
    """Each node's pid and whether it runs, the disks mode, the bootstrap servers."""
    doc = load_state(directory.resolve())
    return {"cluster": doc["cluster"], "kafka_version": doc["kafka_version"], "disks": doc.get("disks"),
            "bootstrap_servers": doc.get("bootstrap_servers"),
            "nodes": [{"id": n["id"], "rack": n["rack"], "pid": n["pid"], "running": pid_alive(n["pid"]),
                       "log_dirs": n["log_dirs"], "cgroups": (doc.get("cgroups") or {}).get(str(n["id"]), [])}
                      for n in doc["nodes"]],
            "node_exporter": {"running": pid_alive(doc.get("node_exporter", {}).get("pid")),
                              "url": doc.get("node_exporter", {}).get("url")},
            "tiered": None if not doc.get("tiered") else {
                "grpc": doc["tiered"]["grpc"], "token_file": doc["tiered"]["token_file"],
                "nodes": [{"id": n["id"], "pid": n["pid"], "running": pid_alive(n["pid"])}
                          for n in doc["tiered"]["nodes"]]}}
