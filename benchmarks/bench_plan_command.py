"""``guardian plan rebalance`` end to end in a fresh process (load, validate, plan, check, write): CPU and peak RSS.

``python -m benchmarks.bench_plan_command [--sizes 1000,3000] [--seed 1]``

For each size (the planner benchmark's shape: brokers x 12 disks, 100 partitions per broker, RF 3, heavy-tailed
traffic, 25% NVMe, :func:`benchmarks.bench_planners.spec_for`) it writes the snapshot file, then runs the CLI
command as its own process and reads the child's CPU seconds (user + system) and peak RSS from ``getrusage``.
Baseline, from the same run and the same file: the planner function alone (:func:`planners.plan_rebalance` on the
parsed snapshot, invariant check included) in another fresh process — what loading, validating and writing add.
Targets (issue 34): the command <= 10 CPU-s at 1,000 brokers; <= 30 CPU-s and <= 1 GiB peak RSS at 3,000.
Writes ``out/bench/plan_command.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
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


def _child(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` as a child process; its CPU seconds, peak RSS (MiB), wall seconds and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"cpu_s": round(cpu, 2), "wall_s": round(wall, 2), "rss_mib": round(after.ru_maxrss / 1024, 1),
            "stdout": done.stdout}


def run(brokers: int, seed: int) -> dict[str, Any]:
    from domain import dump_snapshot
    from kafkasim.scenarios.generator import generate_snapshot

    with tempfile.TemporaryDirectory() as tmp:
        snap_path, plan_path = Path(tmp) / "snapshot.json", Path(tmp) / "plan.json"
        snap_path.write_text(dump_snapshot(generate_snapshot(spec_for(brokers, seed))))
        command = _child([sys.executable, "-c", "from controlplane.cli import main; main()", "plan", "rebalance",
                          "--snapshot", str(snap_path), "--out", str(plan_path)])
        planner = _child([sys.executable, "-c", PLANNER_ONLY, str(snap_path)])
        planner_cpu = json.loads(planner["stdout"].strip().splitlines()[-1])["planner_cpu_s"]
        plan_mb = plan_path.stat().st_size / 1e6
    cpu_target, rss_target = TARGETS.get(brokers, (None, None))
    ok = ((cpu_target is None or command["cpu_s"] <= cpu_target)
          and (rss_target is None or command["rss_mib"] <= rss_target))
    return {"brokers": brokers, "command_cpu_s": command["cpu_s"], "command_wall_s": command["wall_s"],
            "command_rss_mib": command["rss_mib"], "planner_only_cpu_s": round(planner_cpu, 2),
            "planner_process_cpu_s": planner["cpu_s"], "planner_process_rss_mib": planner["rss_mib"],
            "plan_file_mb": round(plan_mb, 1), "cpu_target_s": cpu_target, "rss_target_mib": rss_target, "ok": ok}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sizes", default="1000,3000")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        print(f"... {n} brokers", flush=True)
        rows.append(run(n, args.seed))
    print(f"{'brokers':>7} {'command cpu s':>13} {'wall s':>7} {'peak RSS MiB':>12} | {'baseline: planner cpu s':>23} "
          f"{'its process cpu s':>17} {'RSS MiB':>8} | {'target':>18}")
    for r in rows:
        target = (f"<= {r['cpu_target_s']:.0f} s" + (f", {r['rss_target_mib']:.0f} MiB" if r["rss_target_mib"] else "")
                  if r["cpu_target_s"] else "-")
        print(f"{r['brokers']:>7} {r['command_cpu_s']:>13.1f} {r['command_wall_s']:>7.1f} "
              f"{r['command_rss_mib']:>12.0f} | {r['planner_only_cpu_s']:>23.1f} {r['planner_process_cpu_s']:>17.1f} "
              f"{r['planner_process_rss_mib']:>8.0f} | {target:>18} {'met' if r['ok'] else 'MISSED'}")
    print(f"(CPU seconds on a shared machine; load average {os.getloadavg()[0]:.1f})")
    write_result("plan_command", {"rows": rows})
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
