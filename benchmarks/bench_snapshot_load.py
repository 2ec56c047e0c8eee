"""Loading a 1,000-broker x 12-disk, 100,000-partition (RF 3) snapshot: time and memory.

Target (issue 2): <= 10 s and <= 2 GiB RSS. Baseline in the same run: plain ``json.loads`` of the same
file (what any loader must pay at least), so the cost of validation and of the model is visible.
Each measurement runs in a fresh process so RSS figures are not polluted by each other.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import write_result

CHILD = """
import json, resource, sys, time
path, mode = sys.argv[1], sys.argv[2]
raw = open(path, 'rb').read()
start = time.perf_counter()
if mode == 'json':
    json.loads(raw)
else:
    from domain import parse_snapshot
    snap = parse_snapshot(raw)
    if mode == 'guardian+index':
        snap.index.disk_load
print(json.dumps({'seconds': time.perf_counter() - start,
                  'rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(path: Path, mode: str, repeats: int = 3) -> dict[str, float]:
    runs = [json.loads(subprocess.check_output([sys.executable, "-c", CHILD, str(path), mode]))
            for _ in range(repeats)]
    seconds = sorted(r["seconds"] for r in runs)[len(runs) // 2]
    return {"median_s": seconds, "rss_mib": max(r["rss_mib"] for r in runs)}


def main() -> None:
    from domain import dump_snapshot
    from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot

    spec = GeneratorSpec(brokers=1000, disks_per_broker=12, partitions=100_000, seed=1,
                         idcs=("idc-a", "idc-b", "idc-c"))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.json"
        path.write_text(dump_snapshot(generate_snapshot(spec)))
        size_mb = path.stat().st_size / 1e6
        rows = {mode: measure(path, mode) for mode in ("json", "guardian", "guardian+index")}
    print(f"snapshot file: {size_mb:.1f} MB (1,000 brokers x 12 disks, 100,000 partitions, RF 3)")
    print(f"{'loader':<18}{'median s':>10}{'peak RSS MiB':>14}{'x json.loads':>14}")
    for mode, r in rows.items():
        print(f"{mode:<18}{r['median_s']:>10.2f}{r['rss_mib']:>14.0f}{r['median_s'] / rows['json']['median_s']:>14.2f}")
    ok = rows["guardian+index"]["median_s"] <= 10 and rows["guardian+index"]["rss_mib"] <= 2048
    print(f"target <= 10 s and <= 2048 MiB: {'met' if ok else 'MISSED'}")
    write_result("snapshot_load", {"file_mb": size_mb, "results": rows, "target_met": ok})


if __name__ == "__main__":
    main()
