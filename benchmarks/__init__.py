"""Reproducible benchmarks: each ``bench_*.py`` prints a comparison table and writes JSON to out/bench/."""
