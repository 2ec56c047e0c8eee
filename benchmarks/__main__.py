"""``make bench``: run every ``benchmarks/bench_*.py`` module in turn (each as its own process)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def main() -> int:
    here = Path(__file__).resolve().parent
    selected = set(sys.argv[1:])
    failures = 0
    for module in sorted(p.stem for p in here.glob("bench_*.py")):
        if selected and module not in selected:
            continue
        print(f"\n=== benchmarks.{module} ===", flush=True)
        failures += subprocess.call([sys.executable, "-m", f"benchmarks.{module}"], cwd=here.parent) != 0
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
