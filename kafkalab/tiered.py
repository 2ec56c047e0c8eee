"""Goal: the tiered-metadata service of ``guardian lab up --tiered`` — a Raft group of ``guardian serve`` nodes
whose ``[tiered]`` gRPC port (TLS with the lab's certificate, an operator token) the brokers' RLMM plug-in
(:mod:`kafkalab.plugin`) writes Kafka's remote-log metadata to — and the broker properties that enable
KIP-405 tiered storage with that plug-in and Kafka's ``LocalTieredStorage`` (one directory all brokers
share, as a bucket would be).

Method: :func:`start` writes one config per node (the group's Raft key, the operator token's SHA-256 only,
the lab's server certificate and key on the gRPC port), starts ``python -m controlplane.cli serve`` per node
in a session of its own (the lab outlives the command that started it) and waits until one node's
``/api/v1/tiered/status`` (loopback HTTP, the token) says it is the ready leader.  kafkalab imports none of
Guardian's packages: the service is a set of processes to it, as the brokers are.  The token is in
``tiered/operator.token`` (mode 0600);
the brokers get its *path* (``rlmm.config.guardian.tiered.token.file``).  The state (ports, pids, commands)
is the ``tiered`` object of ``lab.json``: :func:`kill_node`/:func:`start_node` (a ``kill -9`` of the leader in
tests) and ``lab down`` work from it.

Guarantee: :func:`start` returns only when the group has a ready leader, else raises :class:`LabError` with
the nodes' last log lines.
Cost: three Python processes (~120 MB each, clickhouse off); ~5-10 s to a ready leader.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kafkalab import credentials as creds
from kafkalab.errors import LabError
from kafkalab.plugin import RLMM_CLASS, RSM_CLASS

NODES = 3
TOKEN_FILE = "operator.token"
TASK_INTERVAL_MS = 1000
"""remote.log.manager.task.interval.ms of a tiered lab: segments go to remote storage within a second or two."""


def _ports(free: list[int]) -> dict[str, list[int]]:
    return {"raft": free[0:NODES], "http": free[NODES:2 * NODES], "tiered_raft": free[2 * NODES:3 * NODES],
            "grpc": free[3 * NODES:4 * NODES]}


def _config(root: Path, node: int, ports: dict[str, list[int]], s: creds.LabSecrets, token: str) -> Path:
    addrs = [f"127.0.0.1:{p}" for p in ports["tiered_raft"]]
    grpc_of = ", ".join(f'"{a}" = "127.0.0.1:{g}"' for a, g in zip(addrs, ports["grpc"], strict=True))
    digest = hashlib.sha256(token.encode()).hexdigest()  # the token's hash only, as controlplane stores tokens
    text = (f'[raft]\nkey_file = "{root / "raft.key"}"\n'
            f'[[tokens]]\nname = "lab-brokers"\nrole = "operator"\nsha256 = "{digest}"\n'
            '[intervals]\nauto_rebalance_check_s = 3600\n'
            '[clickhouse]\nmode = "off"\n'
            f"[tiered]\nenabled = true\nport = {ports['grpc'][node - 1]}\nraft_addr = \"{addrs[node - 1]}\"\n"
            f"raft_peers = {json.dumps([a for i, a in enumerate(addrs) if i != node - 1])}\n"
            f"grpc_of = {{ {grpc_of} }}\n"
            f'tls_cert_file = "{s.server_cert}"\ntls_key_file = "{s.server_key}"\n')
    path = root / f"node{node}.toml"
    path.write_text(text)
    return path


def _spawn(cmd: list[str], log: Path) -> int:
    env = dict(os.environ)
    repo = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, close_fds=True, env=env)
    return proc.pid


def start(directory: Path, doc: dict[str, Any], free: list[int], ready_timeout_s: float = 60.0) -> dict[str, Any]:
    """Start the service's nodes (ports from ``free``, 4 per node); returns the ``tiered`` state object."""
    root = directory / "tiered"
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(root, 0o700)
    s = creds.LabSecrets(directory)
    if not (root / "raft.key").exists():  # the group's Raft transport key, as raft.auth writes one
        creds.write_secret(root / "raft.key", secrets.token_urlsafe(32) + "\n")
    token = secrets.token_urlsafe(32)
    creds.write_secret(root / TOKEN_FILE, token + "\n")
    ports = _ports(free)
    peers = ",".join(f"127.0.0.1:{p}" for p in ports["raft"])
    http = ",".join(f"http://127.0.0.1:{p}" for p in ports["http"])
    state: dict[str, Any] = {"dir": str(root), "token_file": str(root / TOKEN_FILE), "ca_file": str(s.ca_file),
                             "grpc": [f"127.0.0.1:{p}" for p in ports["grpc"]], "nodes": [],
                             "remote_dir": str(directory / "remote-storage")}
    for node in range(1, NODES + 1):
        cfg = _config(root, node, ports, s, token)
        cmd = [sys.executable, "-m", "controlplane.cli", "serve", "--config", str(cfg), "--node-id", str(node),
               "--peers", peers, "--http-peers", http, "--port", str(ports["http"][node - 1]),
               "--data-dir", str(root / f"node{node}")]
        log = root / f"node{node}.log"
        state["nodes"].append({"id": node, "cmd": cmd, "log": str(log), "grpc": state["grpc"][node - 1],
                               "http": f"http://127.0.0.1:{ports['http'][node - 1]}", "pid": _spawn(cmd, log)})
    doc["tiered"] = state
    try:
        wait_leader(state, ready_timeout_s)
    except BaseException:
        stop(state)
        raise
    return state


def leader(state: dict[str, Any], timeout_s: float = 30.0) -> int:
    """The node id of the ready tiered leader (its ``/api/v1/tiered/status``), waiting up to ``timeout_s``."""
    import urllib.request

    token = Path(state["token_file"]).read_text().strip()
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while True:
        for n in state["nodes"]:
            req = urllib.request.Request(f"{n['http']}/api/v1/tiered/status",
                                         headers={"Authorization": f"Bearer {token}"})
            try:
                with urllib.request.urlopen(req, timeout=2) as r:
                    st = json.loads(r.read())
                if st.get("is_leader") and st.get("ready"):
                    return int(n["id"])
                last = f"node {n['id']}: {st.get('role')}"
            except (OSError, ValueError) as exc:
                last = f"node {n['id']}: {exc}"
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no ready tiered leader within {timeout_s:.0f} s ({last})")
        time.sleep(0.3)


def wait_leader(state: dict[str, Any], timeout_s: float) -> int:
    from kafkalab.lab import _tail, pid_alive

    deadline = time.monotonic() + timeout_s
    while True:
        for n in state["nodes"]:
            if not pid_alive(n["pid"]):
                raise LabError(f"tiered-metadata node {n['id']} exited during start-up; its log ({n['log']}) ends:\n"
                               f"{_tail(Path(n['log']))}")
        try:
            return leader(state, min(5.0, max(0.5, deadline - time.monotonic())))
        except TimeoutError as exc:
            if time.monotonic() >= deadline:
                raise LabError(f"the tiered-metadata service has no ready leader: {exc}") from None


def broker_properties(state: dict[str, Any], cluster: str) -> dict[str, str]:
    """What a broker needs to tier with Guardian's RLMM and Kafka's LocalTieredStorage."""
    p = "rlmm.config.guardian.tiered."
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": RSM_CLASS,
        "remote.log.metadata.manager.class.name": RLMM_CLASS,
        "rsm.config.dir": state["remote_dir"],
        "rsm.config.delete.on.close": "false",
        p + "targets": ",".join(state["grpc"]),
        p + "cluster": cluster,
        p + "ca.file": state["ca_file"],
        p + "token.file": state["token_file"],
        "remote.log.manager.task.interval.ms": str(TASK_INTERVAL_MS),
        "log.retention.check.interval.ms": "1000",
    }


def kafka_rlmm_properties(directory: Path, keystore: Path, ca_file: Path, brokers: int) -> dict[str, str]:
    """Tiered storage with Kafka's own TopicBasedRemoteLogMetadataManager (the bench's baseline): its clients on
    the INTERNAL listener (mutual TLS with the node's keystore), the same RSM and task interval as ours."""
    c = "rlmm.config.remote.log.metadata.common.client."
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": RSM_CLASS,
        "rsm.config.dir": str(directory / "remote-storage"),
        "rsm.config.delete.on.close": "false",
        "remote.log.metadata.manager.listener.name": "INTERNAL",
        "rlmm.config.remote.log.metadata.topic.replication.factor": str(min(3, brokers)),
        c + "ssl.keystore.type": "PEM",
        c + "ssl.keystore.location": str(keystore),
        c + "ssl.truststore.type": "PEM",
        c + "ssl.truststore.location": str(ca_file),
        "remote.log.manager.task.interval.ms": str(TASK_INTERVAL_MS),
        "log.retention.check.interval.ms": "1000",
    }


def stop(state: dict[str, Any], grace_s: float = 10.0) -> list[str]:
    """Stop every node (SIGTERM, then SIGKILL); returns what is still running."""
    from kafkalab.lab import _stop_pid, pid_alive

    for n in state.get("nodes", []):
        _stop_pid(n.get("pid"), grace_s)
    return [f"tiered node {n['id']} (pid {n['pid']}) is still running" for n in state.get("nodes", [])
            if pid_alive(n.get("pid"))]


def kill_node(state: dict[str, Any], node_id: int) -> None:
    """``kill -9`` one node (its process group) and wait until it is gone."""
    import signal

    from kafkalab.lab import pid_alive

    n = next((m for m in state["nodes"] if m["id"] == node_id), None)
    if n is None or not pid_alive(n["pid"]):
        raise LabError(f"tiered node {node_id} is not running")
    os.killpg(n["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and pid_alive(n["pid"]):
        time.sleep(0.05)


def start_node(state: dict[str, Any], node_id: int) -> int:
    """Start a stopped node again with its command; returns its pid (the caller saves the state, as
    :func:`kafkalab.lab.start_tiered_node` does)."""
    n = next(m for m in state["nodes"] if m["id"] == node_id)
    n["pid"] = _spawn(n["cmd"], Path(n["log"]))
    return int(n["pid"])
