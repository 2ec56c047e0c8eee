"""``guardian plan rebalance`` end to end in a fresh process (load, validate, plan, check, write): CPU and peak RSS.

``python -m benchmarks.bench_plan_command [--sizes 1000,3000] [--seed 1] [--no-api] [--baseline-src DIR]``

For each size (the planner benchmark's shape: brokers x 12 disks, 100 partitions per broker, RF 3, heavy-tailed
traffic, 25% NVMe, :func:`benchmarks.bench_planners.spec_for`) it writes the snapshot file, then runs the CLI
command as its own process and reads the child's CPU seconds (user + system) and peak RSS from ``getrusage``.
The API path: a real ``guardian serve`` (one node, :class:`controlplane.launcher.ServiceCluster`) gets the same
snapshot by ``PUT /api/v1/clusters/NAME/snapshot`` and a ``POST /api/v1/plans`` of kind rebalance (planned,
checked, recorded as a proposal); its peak RSS (``VmHWM``) and CPU seconds are read from ``/proc``.
Baselines, from the same run and the same file: the planner function alone (:func:`planners.plan_rebalance` on
the parsed snapshot, invariant check included) in another fresh process — what loading, validating and writing
add; with ``--baseline-src DIR`` (e.g. a checkout of main) the same command run from that source tree too.
Targets (issue 34): the command <= 10 CPU-s at 1,000 brokers; <= 30 CPU-s and <= 1 GiB peak RSS at 3,000; the
API within the same memory. Writes ``out/bench/plan_command.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.bench_planners import spec_for
from benchmarks.common import write_result

TARGETS = {1000: (10.0, None), 3000: (30.0, 1024.0)}  # brokers -> (CPU s, peak RSS MiB or None)

PLANNER_ONLY = """
import json, resource, sys, time
from domain import parse_snapshot
from planners import plan_rebalance
snap = parse_snapshot(open(sys.argv[1], 'rb').read())
_ = snap.index
c0 = time.process_time()
plan_rebalance(snap)
print(json.dumps({'planner_cpu_s': time.process_time() - c0}))
"""


def _child(argv: list[str], src: str | None = None) -> dict[str, Any]:
    """Run ``argv`` as a child process (with ``src`` first on its PYTHONPATH, and as its working directory: a
    ``python -c`` child puts its working directory before PYTHONPATH, so from this tree's directory the baseline
    ran this tree's code); its CPU seconds, peak RSS (MiB), wall seconds and stdout, from its own rusage."""
    env = {**os.environ, "PYTHONPATH": src} if src else None
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env, cwd=src)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        if child.returncode != 0:
            raise subprocess.CalledProcessError(child.returncode, argv)
        out.seek(0)
        stdout = out.read().decode()
    return {"cpu_s": round(usage.ru_utime + usage.ru_stime, 2), "wall_s": round(wall, 2),
            "rss_mib": round(usage.ru_maxrss / 1024, 1), "stdout": stdout}


def _proc(pid: int) -> tuple[float, float]:
    """(peak RSS MiB, CPU seconds) of process ``pid`` so far, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    hwm = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return hwm, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def api_run(snap_path: Path, cluster_name: str, src: str | None = None) -> dict[str, Any]:
    """PUT the snapshot into a fresh one-node ``guardian serve`` (run from ``src`` when given), raise its state
    version to this tree's (a plan over one Raft command is staged in chunks: version 3), POST a rebalance and GET
    the recorded plan: peak RSS and CPU after each step, and how the POST answered."""
    import httpx

    from controlplane.launcher import ServiceCluster
    from controlplane.state.versions import LATEST

    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")  # a fresh snapshot: plans refuse stale ones
    text = re.sub(rb'"taken_at": ?"[^"]*"', f'"taken_at": "{now}"'.encode(), snap_path.read_bytes(), count=1)
    saved = os.environ.get("PYTHONPATH")
    got_rss = got_s = got_mb = None
    with tempfile.TemporaryDirectory() as tmp:
        group = ServiceCluster(Path(tmp), size=1)
        here = os.getcwd()
        if src:  # ``python -m`` puts the working directory first on the child's path: start it from ``src``
            os.environ["PYTHONPATH"] = src
            os.chdir(src)
        try:
            group.start_all()
        finally:
            os.chdir(here)
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
        try:
            group.leader(timeout=60)
            pid = group.procs[1].pid
            with httpx.Client(base_url=group.url(1), headers={"Authorization": f"Bearer {group.token}"},
                              timeout=1800) as client:
                raised = client.post("/api/v1/state/version", json={"version": LATEST})  # older code: refused
                client.post("/api/v1/clusters?probe=false",
                            json={"name": cluster_name, "bootstrap_servers": ["h:1"]}).raise_for_status()
                idle_rss, cpu0 = _proc(pid)
                client.put(f"/api/v1/clusters/{cluster_name}/snapshot", content=text,
                           headers={"Content-Type": "application/json"}).raise_for_status()
                put_rss, cpu1 = _proc(pid)
                del text
                t0 = time.monotonic()
                answer = client.post("/api/v1/plans", json={"cluster": cluster_name, "kind": "rebalance"})
                post_s = time.monotonic() - t0
                peak, cpu2 = _proc(pid)
                if answer.is_success:
                    t0 = time.monotonic()
                    got = client.get(f"/api/v1/plans/{answer.json()['plan_id']}")
                    got_s, got_mb = time.monotonic() - t0, len(got.content) / 1e6
                    got_rss, _ = _proc(pid)
        finally:
            group.close()
    # before state version 3, a plan too large for one replicated command was planned and checked, then refused
    detail = "" if answer.is_success else str(answer.json().get("detail", answer.text[:200]))
    return {"api_idle_rss_mib": round(idle_rss), "api_put_rss_mib": round(put_rss), "api_rss_mib": round(peak),
            "api_put_cpu_s": round(cpu1 - cpu0, 2), "api_plan_cpu_s": round(cpu2 - cpu1, 2),
            "api_post_wall_s": round(post_s, 1), "api_status": answer.status_code, "api_detail": detail,
            "api_state_version_raised": raised.is_success,
            **({"api_get_rss_mib": round(got_rss), "api_get_wall_s": round(got_s or 0, 2), "api_get_mb": round(
                got_mb or 0, 1)} if got_rss is not None else {})}


def run(brokers: int, seed: int, api: bool = True, baseline_src: str | None = None,
        api_baseline_src: str | None = None) -> dict[str, Any]:
    from domain import dump_snapshot
    from kafkasim.scenarios.generator import generate_snapshot

    spec = spec_for(brokers, seed)
    with tempfile.TemporaryDirectory() as tmp:
        snap_path, plan_path = Path(tmp) / "snapshot.json", Path(tmp) / "plan.json"
        snap_path.write_text(dump_snapshot(generate_snapshot(spec)))
        argv = [sys.executable, "-c", "from controlplane.cli import main; main()", "plan", "rebalance",
                "--snapshot", str(snap_path), "--out", str(plan_path)]
        planner = _child([sys.executable, "-c", PLANNER_ONLY, str(snap_path)])
        planner_cpu = json.loads(planner["stdout"].strip().splitlines()[-1])["planner_cpu_s"]
        base = _child(argv, baseline_src) if baseline_src else None
        command = _child(argv)
        plan_mb = plan_path.stat().st_size / 1e6
        served = api_run(snap_path, spec.cluster) if api else {}
        if api and api_baseline_src:
            served |= {f"base_{k}": v for k, v in api_run(snap_path, spec.cluster, api_baseline_src).items()}
            served["base_src"] = api_baseline_src
    cpu_target, rss_target = TARGETS.get(brokers, (None, None))
    # the API counts only when it recorded the plan (before the chunked uploads it answered 400 at 1,000 brokers)
    ok = ((cpu_target is None or command["cpu_s"] <= cpu_target)
          and (rss_target is None or (command["rss_mib"] <= rss_target
                                      and served.get("api_rss_mib", 0) <= rss_target))
          and (not served or 200 <= int(served["api_status"]) < 300))
    return {"brokers": brokers, "command_cpu_s": command["cpu_s"], "command_wall_s": command["wall_s"],
            "command_rss_mib": command["rss_mib"], "planner_only_cpu_s": round(planner_cpu, 2),
            "planner_process_cpu_s": planner["cpu_s"], "planner_process_rss_mib": planner["rss_mib"],
            **({"baseline_src": baseline_src, "baseline_cpu_s": base["cpu_s"], "baseline_rss_mib": base["rss_mib"]}
               if base else {}),
            **served,
            "plan_file_mb": round(plan_mb, 1), "cpu_target_s": cpu_target, "rss_target_mib": rss_target, "ok": ok}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="1000,3000")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-api", dest="api", action="store_false", help="skip the API path (guardian serve)")
    parser.add_argument("--baseline-src", default=os.environ.get("BENCH_BASELINE_SRC"),
                        help="a source tree (e.g. a checkout of main) whose command runs too, as the baseline")
    parser.add_argument("--api-baseline-src", default=os.environ.get("BENCH_API_BASELINE_SRC"),
                        help="a source tree whose guardian serve gets the same PUT and POST too, as the API baseline")
    args = parser.parse_args(argv)
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        print(f"... {n} brokers", flush=True)
        rows.append(run(n, args.seed, args.api, args.baseline_src, args.api_baseline_src))
    print(f"{'brokers':>7} {'command cpu s':>13} {'wall s':>7} {'peak RSS MiB':>12} | {'baseline: planner cpu s':>23} "
          f"{'its process cpu s':>17} {'RSS MiB':>8} | {'target':>18}")
    for r in rows:
        target = (f"<= {r['cpu_target_s']:.0f} s" + (f", {r['rss_target_mib']:.0f} MiB" if r["rss_target_mib"] else "")
                  if r["cpu_target_s"] else "-")
        print(f"{r['brokers']:>7} {r['command_cpu_s']:>13.1f} {r['command_wall_s']:>7.1f} "
              f"{r['command_rss_mib']:>12.0f} | {r['planner_only_cpu_s']:>23.1f} {r['planner_process_cpu_s']:>17.1f} "
              f"{r['planner_process_rss_mib']:>8.0f} | {target:>18} {'met' if r['ok'] else 'MISSED'}")
    for r in rows:
        if "api_rss_mib" in r:
            for who, p in (("this tree", ""), (f"baseline {r.get('base_src', '')}", "base_")):
                if f"{p}api_rss_mib" not in r:
                    continue
                print(f"{r['brokers']:>7} API, {who} (guardian serve, PUT snapshot + POST /api/v1/plans rebalance"
                      f" + GET the plan): peak RSS {r[p + 'api_rss_mib']} MiB (idle {r[p + 'api_idle_rss_mib']}, after "
                      f"the PUT {r[p + 'api_put_rss_mib']}" + (f", after the GET {r[p + 'api_get_rss_mib']}"
                                                               if p + "api_get_rss_mib" in r else "")
                      + f"); CPU s: PUT {r[p + 'api_put_cpu_s']:.1f}, plan {r[p + 'api_plan_cpu_s']:.1f}; POST "
                      f"answered {r[p + 'api_status']} in {r[p + 'api_post_wall_s']} s"
                      + (f" ({r[p + 'api_detail']}: planned and checked, not recorded)" if r[p + "api_detail"] else "")
                      + (f"; GET {r[p + 'api_get_mb']} MB in {r[p + 'api_get_wall_s']} s" if p + "api_get_mb" in r
                         else ""))
        if "baseline_cpu_s" in r:
            print(f"{r['brokers']:>7} baseline command from {r['baseline_src']}: {r['baseline_cpu_s']:.1f} CPU-s, "
                  f"peak RSS {r['baseline_rss_mib']:.0f} MiB (this tree: {r['command_cpu_s']:.1f} CPU-s, "
                  f"{r['command_rss_mib']:.0f} MiB)")
    print(f"(CPU seconds on a shared machine; load average {os.getloadavg()[0]:.1f})")
    write_result("plan_command", {"rows": rows})
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
