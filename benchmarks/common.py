"""Helpers shared by benchmarks: timing medians, peak RSS, result files."""

from __future__ import annotations

import json
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "out" / "bench"


def median_seconds(fn: Callable[[], object], repeats: int = 3) -> tuple[float, list[float]]:
    """Run ``fn`` ``repeats`` times; return the median wall time and all timings (seconds)."""
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        timings.append(time.perf_counter() - start)
    return statistics.median(timings), timings


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_result(name: str, data: dict[str, Any]) -> Path:
    """Write ``out/bench/<name>.json`` and return its path."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path
