"""Pictures people would rather look at than read: disk utilisation before/after, as a PNG."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: render straight to files
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from domain import ClusterSnapshot, balance_disks


def disk_utils(snapshot: ClusterSnapshot) -> dict[str, float]:
    """``"broker:path"`` -> estimated utilisation (disk load / max throughput) of every balanced disk."""
    index = snapshot.index
    return {f"{b}:{p}": index.disk_util_estimate((b, p)) for b, p in balance_disks(snapshot)}


def measured_utils(snapshot: ClusterSnapshot) -> dict[str, float]:
    """``"broker:path"`` -> the utilisation the disk itself reported, for every balanced disk."""
    index = snapshot.index
    return {f"{b}:{p}": index.disk_by_id[(b, p)].util for b, p in balance_disks(snapshot)}


def plot_before_after(before: Mapping[str, float], after: Mapping[str, float], path: Path, title: str,
                      means: Mapping[str, float],
                      measured: tuple[Mapping[str, float], Mapping[str, float]] | None = None) -> Path:
    """Bar chart of each disk's utilisation before and after (sorted by the before value); ``means`` (pool ->
    mean util) drawn as one line per pool — the table's "mean util" (total load over total disk throughput,
    the level balancing evens disks towards), so the picture and the table show one mean, the same;
    ``measured`` adds the util the disks reported. Writes and returns ``path``."""
    fig = figure_before_after(before, after, title, means, measured)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def figure_before_after(before: Mapping[str, float], after: Mapping[str, float], title: str,
                        means: Mapping[str, float],
                        measured: tuple[Mapping[str, float], Mapping[str, float]] | None = None) -> Figure:
    """The figure :func:`plot_before_after` writes."""
    keys = sorted(before, key=lambda k: (-before[k], k))
    x = range(len(keys))
    fig, ax = plt.subplots(figsize=(max(8.0, len(keys) * 0.22), 4.8), dpi=110)
    ax.bar([i - 0.2 for i in x], [before[k] for k in keys], width=0.4, label="before", color="#d9534f")
    ax.bar([i + 0.2 for i in x], [after.get(k, 0.0) for k in keys], width=0.4, label="after", color="#5cb85c")
    if measured is not None:
        ax.plot(list(x), [measured[0].get(k, 0.0) for k in keys], "k.", markersize=3, label="measured util before")
        ax.plot(list(x), [measured[1].get(k, 0.0) for k in keys], "b.", markersize=3, label="measured util after")
    for pool, mean in sorted(means.items()):
        ax.axhline(mean, color="#337ab7", linestyle="--", linewidth=0.8, label=f"mean util ({pool}) {mean:.2f}")
    ax.set_xticks(list(x))
    ax.set_xticklabels(keys, rotation=90, fontsize=6)
    ax.set_ylabel("disk utilisation")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
