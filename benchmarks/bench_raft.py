"""Raft benchmark: replicated synchronous commands/s and leader failover time.

    python -m benchmarks.bench_raft [--seconds 3] [--kills 5] [--quick]

Each figure is measured twice in the same run: with pysyncobj's default settings (batched
append-entries, 0.4-1.4 s election timeouts) as the baseline, and with Guardian's tuned
:class:`raft.node.RaftSettings`.  Throughput is measured with the proposers in the leader's own
process (as the service's API threads will be), on 1 node and on 3 nodes (the two followers are
separate processes), and end-to-end through ``raft.node_main``'s HTTP API.  Failover kills the
leader of 3 processes with SIGKILL while a client streams writes, then checks that no
acknowledged write was lost and that all nodes converge to identical state.
Writes ``out/bench/raft.json``.  DESIGN targets: >= 1,000 commands/s, failover <= 2 s.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import write_result
from raft.auth import write_new_key
from raft.demo import DemoStateMachine, validate_demo_command
from raft.localcluster import LeaderFollowingWriter, LocalCluster, NodeProcess, free_ports, kill_leader
from raft.node import RaftNode, RaftSettings

TARGET_CMDS = 1000.0
TARGET_FAILOVER_S = 2.0

CONFIGS: dict[str, tuple[RaftSettings, list[str]]] = {
    # name -> (settings of the in-process node, extra args of node_main processes)
    "pysyncobj defaults": (RaftSettings.pysyncobj_defaults(), ["--pysyncobj-defaults"]),
    "guardian tuned": (RaftSettings(), []),
}


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def drive(propose: Callable[[int, int], None], threads: int, seconds: float) -> dict[str, float]:
    """Run ``threads`` closed-loop clients for ``seconds``; return rate and latency percentiles."""
    latencies: list[list[float]] = [[] for _ in range(threads)]
    errors = [0] * threads
    stop = threading.Event()

    def client(t: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            t0 = time.perf_counter()
            try:
                propose(t, i)
            except Exception:
                errors[t] += 1
                time.sleep(0.01)
                continue
            latencies[t].append(time.perf_counter() - t0)

    workers = [threading.Thread(target=client, args=(t,), daemon=True) for t in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    time.sleep(seconds)
    stop.set()
    for w in workers:
        w.join(timeout=30)
    elapsed = time.perf_counter() - start
    flat = [x for lat in latencies for x in lat]
    return {
        "ops_per_s": len(flat) / elapsed,
        "ops": len(flat),
        "errors": sum(errors),
        "p50_ms": _pct(flat, 0.5) * 1000,
        "p99_ms": _pct(flat, 0.99) * 1000,
    }


def local_leader_group(
    base: Path, size: int, settings: RaftSettings, extra: list[str], attempts: int = 6
) -> tuple[RaftNode, list[NodeProcess]]:
    """An in-process node that leads a group of ``size`` (the others are node_main processes)."""
    for attempt in range(attempts):
        ports = free_ports(2 * size)
        addrs = [f"127.0.0.1:{p}" for p in ports[:size]]
        root = base / f"g{size}-{attempt}"
        key_file = root / "raft.key"
        node = RaftNode(
            addrs[0],
            addrs,
            DemoStateMachine(),
            root / "local",
            validator=validate_demo_command,
            settings=settings,
            key=write_new_key(key_file),
        )
        procs = [
            NodeProcess(ports[i], ports[size + i], root / f"node{i}", [a for a in addrs if a != addrs[i]],
                        ["--key-file", str(key_file), *extra])
            for i in range(1, size)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (node.ready or (node.leader not in (None, addrs[0]))):
            time.sleep(0.02)
        if node.is_leader and node.wait_ready(5) and _stable_leader(node, settings):
            return node, procs
        node.close()  # another node won the election: try again with a fresh group
        for p in procs:
            p.kill()
    raise RuntimeError("the in-process node never became leader")


def _stable_leader(node: RaftNode, settings: RaftSettings) -> bool:
    """All peers connected and still the same leader one max election timeout later.

    (pysyncobj connects only from the higher address to the lower one and retries every
    ``connection_retry`` s; a follower that has not heard from the leader starts an election.)
    """
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and len(node.status()["connected_peers"]) < len(node.peers):
        time.sleep(0.05)
    term = node.status()["term"]
    time.sleep(settings.election_timeout_max + 0.5)
    st = node.status()
    return bool(st["is_leader"] and st["term"] == term and len(st["connected_peers"]) == len(node.peers))


def bench_in_process(base: Path, seconds: float) -> dict[str, Any]:
    """Sync proposals/s from threads inside the leader's process, 1 and 3 nodes."""
    out: dict[str, Any] = {}
    for name, (settings, extra) in CONFIGS.items():
        for size in (1, 3):
            node, procs = local_leader_group(base / name.replace(" ", "-"), size, settings, extra)
            try:
                for threads in (1, 16):

                    def propose(t: int, i: int, node: RaftNode = node, threads: int = threads) -> None:
                        node.propose({"type": "put", "key": f"c{threads}-{t}-{i}", "value": i}, timeout=10)

                    key = f"{size} node{'s' if size > 1 else ''}, {threads} client{'s' if threads > 1 else ''}"
                    out.setdefault(key, {})[name] = drive(propose, threads, seconds)
                    print(f"  {key:<28} {name:<20} {out[key][name]['ops_per_s']:8.0f} cmd/s", flush=True)
            finally:
                node.close()
                for p in procs:
                    p.kill()
    return out


def bench_http(base: Path, seconds: float) -> dict[str, Any]:
    """End-to-end proposals/s through node_main's HTTP API (keep-alive clients) on 3 processes."""
    out: dict[str, Any] = {}
    for name, (_settings, extra) in CONFIGS.items():
        cluster = LocalCluster(3, base / ("http-" + name.replace(" ", "-")), extra_args=extra)
        try:
            cluster.start()
            leader = cluster.nodes[cluster.wait_leader(timeout=30)]
            for threads in (1, 8):
                conns = [http.client.HTTPConnection("127.0.0.1", leader.http_port, timeout=10) for _ in range(threads)]

                def propose(t: int, i: int, conns: list[http.client.HTTPConnection] = conns) -> None:
                    body = json.dumps({"type": "put", "key": f"h{t}-{i}", "value": i})
                    conns[t].request("POST", "/propose", body=body, headers={"Content-Type": "application/json"})
                    resp = conns[t].getresponse()
                    resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"HTTP {resp.status}")

                key = f"3 nodes via HTTP, {threads} client{'s' if threads > 1 else ''}"
                out.setdefault(key, {})[name] = drive(propose, threads, seconds)
                print(f"  {key:<28} {name:<20} {out[key][name]['ops_per_s']:8.0f} cmd/s", flush=True)
                for c in conns:
                    c.close()
        finally:
            cluster.close()
    return out


def bench_failover(base: Path, kills: int) -> dict[str, Any]:
    """Kill -9 the leader ``kills`` times under a write stream; failover times and safety checks."""
    out: dict[str, Any] = {}
    for name, (_settings, extra) in CONFIGS.items():
        cluster = LocalCluster(3, base / ("fo-" + name.replace(" ", "-")), extra_args=extra)
        samples = []
        try:
            cluster.start()
            cluster.wait_leader(timeout=30)
            writer = LeaderFollowingWriter(cluster)
            writer.start()
            try:
                for _ in range(kills):
                    time.sleep(0.7)
                    sample = kill_leader(cluster, writer, timeout=20)
                    samples.append(sample)
                    print(
                        f"  failover {name:<20} new leader {sample.election_s:5.2f}s, "
                        f"first ack {sample.first_ack_s:5.2f}s",
                        flush=True,
                    )
                    cluster.nodes[sample.killed].start()
                    cluster.wait_node_ready(sample.killed, timeout=30)
                time.sleep(0.5)
            finally:
                writer.stop()
            states = cluster.wait_converged(timeout=30)
            identical = all(s["state"] == states[0]["state"] for s in states) and len(states) == 3
            problems = writer.problems(states[0]["state"])
            truncations = sum((st or {}).get("truncations_of_applied", 0) for st in cluster.statuses())
        finally:
            cluster.close()
        elections = [s.election_s for s in samples]
        acks = [s.first_ack_s for s in samples]
        out[name] = {
            "kills": len(samples),
            "election_s": elections,
            "first_ack_s": acks,
            "election_median_s": statistics.median(elections),
            "election_max_s": max(elections),
            "first_ack_median_s": statistics.median(acks),
            "first_ack_max_s": max(acks),
            "acked_writes": len(writer.acked),
            "acked_id_blocks": len(writer.id_blocks),
            "nodes_identical": identical,
            "lost_write_problems": problems,
            "pysyncobj_truncation_warnings": truncations,
        }
    return out


def render(results: dict[str, Any]) -> str:
    """The comparison table printed at the end."""
    names = list(CONFIGS)
    lines = [
        "Raft (pysyncobj) — replicated synchronous commands and leader failover",
        f"{'scenario':<34}" + "".join(f"{n:>26}" for n in names),
    ]
    for key, per in {**results["in_process"], **results["http"]}.items():
        cells = [
            f"{per[n]['ops_per_s']:8.0f}/s p50 {per[n]['p50_ms']:6.1f}ms"
            + (f" ({per[n]['errors']} err)" if per[n]["errors"] else "")
            for n in names
        ]
        lines.append(f"{key:<34}" + "".join(f"{c:>26}" for c in cells))
    fo = results["failover"]
    rows = [
        (
            "failover: new leader median/max",
            lambda r: f"{r['election_median_s']:.2f}s / {r['election_max_s']:.2f}s",
        ),
        (
            "failover: first ack median/max",
            lambda r: f"{r['first_ack_median_s']:.2f}s / {r['first_ack_max_s']:.2f}s",
        ),
        ("kills / acked writes", lambda r: f"{r['kills']} / {r['acked_writes']}"),
        (
            "lost acked writes / diverged",
            lambda r: (
                f"{'none' if not r['lost_write_problems'] else 'YES'} / {'no' if r['nodes_identical'] else 'YES'}"
            ),
        ),
        ("pysyncobj truncation warnings", lambda r: str(r["pysyncobj_truncation_warnings"])),
    ]
    for label, fmt in rows:
        lines.append(f"{label:<34}" + "".join(f"{fmt(fo[n]):>26}" for n in names))
    tuned = results["summary"]
    lines.append(
        f"target >= {TARGET_CMDS:.0f} cmd/s on 3 nodes: {'MET' if tuned['throughput_ok'] else 'MISSED'} "
        f"({tuned['tuned_3node_best_cmds']:.0f}/s); failover <= {TARGET_FAILOVER_S:.0f}s: "
        f"{'MET' if tuned['failover_ok'] else 'MISSED'} (max {tuned['tuned_failover_max_s']:.2f}s)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bench_raft", description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=3.0, help="duration of each throughput measurement")
    p.add_argument("--kills", type=int, default=5, help="leader kills per configuration")
    p.add_argument("--quick", action="store_true", help="1 s measurements and 2 kills")
    p.add_argument("--out", default=None, help="JSON output (default out/bench/raft.json)")
    args = p.parse_args(argv)
    seconds, kills = (1.0, 2) if args.quick else (args.seconds, args.kills)
    with tempfile.TemporaryDirectory(prefix="bench-raft-") as tmp:
        base = Path(tmp)
        print("throughput, proposers inside the leader process:", flush=True)
        in_process = bench_in_process(base, seconds)
        print("throughput through HTTP:", flush=True)
        http_rates = bench_http(base, seconds)
        print("failover:", flush=True)
        failover = bench_failover(base, kills)
    tuned = "guardian tuned"
    best3 = max(v[tuned]["ops_per_s"] for k, v in in_process.items() if k.startswith("3 nodes"))
    fo = failover[tuned]
    results: dict[str, Any] = {
        "in_process": in_process,
        "http": http_rates,
        "failover": failover,
        "settings": {n: vars(s) for n, (s, _) in CONFIGS.items()},
        "summary": {
            "tuned_3node_best_cmds": best3,
            "throughput_ok": best3 >= TARGET_CMDS,
            "tuned_failover_max_s": fo["election_max_s"],
            "failover_ok": fo["election_max_s"] <= TARGET_FAILOVER_S,
            "safety_ok": fo["nodes_identical"] and not fo["lost_write_problems"],
        },
    }
    table = render(results)
    print()
    print(table)
    results = json.loads(json.dumps(results, default=str))
    if args.out is None:
        out = write_result("raft", results)
    else:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0 if results["summary"]["safety_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
