"""Self-healing benchmark (issue 33): the full-size fault scenarios over kafkasim, each with its baseline.

    python -m benchmarks.bench_healing

Runs the ``bench``-marked self-healing tests (kept out of ``make test`` for their size) and prints their
figures: a dead broker holding >= 100 GB behind a 150 MB/s leased line, healed with the heal-rate floor and,
in the same run, without it (heal copies as any migration: the previous behaviour); and a heavy rebalance
for 30 simulated minutes, with the disk-rounds the previous fail-slow rule would have flagged on the same
rounds. Each test asserts its bound; the printed lines are the figures. Writes ``out/bench/healing.json``.
Cost: ~5 minutes on 2 cores.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import write_result

TESTS = ("tests/integration/test_self_healing_scale.py", "tests/integration/test_self_healing_rebalance.py")


def main() -> int:
    root = Path(__file__).resolve().parents[1]
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "bench", "-s",
                          *TESTS], cwd=root, capture_output=True, text=True)
    figures = [line for line in run.stdout.splitlines()
               if line.startswith(("with the heal floor", "baseline, no heal floor", "heavy rebalance"))]
    for line in figures:
        print(line)
    print(run.stdout.splitlines()[-1] if run.stdout else run.stderr[-2000:])
    path = write_result("healing", {"figures": figures, "passed": run.returncode == 0,
                                    "seconds": round(time.monotonic() - start, 1)})
    print(f"wrote {path}")
    if run.returncode:
        print(run.stdout[-4000:], run.stderr[-2000:])
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
