"""The demo's picture and table show one mean per pool, the same figure (before: the picture drew two other
means — the plain average of the disks before and after — beside the table's throughput-weighted one)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from controlplane.demo import before_after_table, figures, table_means
from controlplane.picture import disk_utils, figure_before_after, plot_before_after
from kafkasim.scenarios.generator import GeneratorSpec, generate_snapshot


def test_the_picture_draws_the_table_s_mean_and_no_other(tmp_path: Path) -> None:
    snap = generate_snapshot(GeneratorSpec(brokers=6, disks_per_broker=2, partitions=60, seed=3,
                                           pools={"shared": 0.5, "payments": 0.5}))
    after = figures(snap)
    means = table_means(after)
    assert set(means) == {"shared", "payments"}
    fig = figure_before_after(disk_utils(snap), disk_utils(snap), "t", means)
    (ax,) = fig.axes
    lines = {str(ln.get_label()): float(next(iter(ln.get_ydata()))) for ln in ax.get_lines()  # type: ignore[arg-type]
             if str(ln.get_label()).startswith("mean")}
    assert lines == {f"mean util ({p}) {m:.2f}": pytest.approx(m) for p, m in means.items()}
    table = before_after_table(after, after)
    mean_column = next(c for c in table.columns if c.header == "mean util after")
    assert sorted(str(c) for c in mean_column._cells) == sorted(f"{m:.2f}" for m in means.values())
    path = plot_before_after(disk_utils(snap), disk_utils(snap), tmp_path / "p.png", "t", means)
    assert path.stat().st_size > 0
