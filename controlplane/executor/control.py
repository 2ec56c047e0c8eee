"""Operator requests to a running ``guardian exec run`` that owns a local state file, and progress views.

A local state file has exactly one writer (the running executor), so ``guardian exec stop`` / ``caps``
append a request to ``<state file>.requests``; the executor takes the whole file each pass (atomic
rename) and turns each request into a command on its store. With the Raft store the API proposes
the same commands directly.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from controlplane.executor.reconcile import Executor
from domain.execution import progress_json


def requests_path(state_file: Path) -> Path:
    """Where requests for the executor owning ``state_file`` are queued."""
    return state_file.with_name(state_file.name + ".requests")


def queue_request(state_file: Path, request: Mapping[str, Any]) -> None:
    """Append one request (one JSON line, a single ``write`` so concurrent writers do not interleave)."""
    path = requests_path(state_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(dict(request)) + "\n").encode())
    finally:
        os.close(fd)


def take_requests(state_file: Path) -> list[dict[str, Any]]:
    """Atomically take every queued request (malformed lines are skipped)."""
    path = requests_path(state_file)
    taken = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        path.rename(taken)
    except FileNotFoundError:
        return []
    out = []
    try:
        for line in taken.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                item = json.loads(line)
                if isinstance(item, dict):
                    out.append(item)
    finally:
        taken.unlink(missing_ok=True)
    return out


def apply_requests(executor: Executor, requests: list[dict[str, Any]]) -> list[str]:
    """Turn queued requests into store commands on the active execution; returns what was done."""
    done = []
    active = executor.active_execution()
    for req in requests:
        if active is None:
            done.append(f"ignored {req.get('op')}: no active execution")
            continue
        eid = active.id
        if req.get("op") == "stop":
            executor.stop(eid, rollback=bool(req.get("rollback")), why=str(req.get("why") or "operator stop"))
            done.append(f"execution {eid}: stop{' with rollback' if req.get('rollback') else ''}")
        elif req.get("op") == "caps":
            caps = {k: int(v) for k, v in (req.get("caps") or {}).items() if isinstance(v, int) and v >= 1}
            if caps:
                executor.set_caps(eid, caps)
                done.append(f"execution {eid}: caps {caps}")
        else:
            done.append(f"ignored unknown request {req.get('op')!r}")
    return done


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _fmt_eta(s: float | None) -> str:
    if s is None or s != s or s < 0:
        return "--"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def task_eta(task: Mapping[str, Any]) -> float | None:
    """Seconds left for one task at its observed rate (``None`` when unknown)."""
    rate = float(task.get("rate_bytes_per_s") or 0.0)
    left = max(int(task.get("bytes_total") or 0) - int(task.get("bytes_done") or 0), 0)
    return left / rate if rate > 0 else None


def progress_view(execution: Mapping[str, Any], top: int = 8) -> Group:
    """A rich renderable: execution bar (bytes, rate, ETA), task counts, the in-flight tasks (the same
    for a local execution and a service's, as its API returns it)."""
    prog = progress_json(execution)
    total = int(prog.get("bytes_total") or 0)
    done = int(prog.get("bytes_done") or 0)
    head = Text.assemble((f"execution {execution['id']} ", "bold"), f"plan {execution['plan_id']} · ",
                         (execution["status"], "cyan"),
                         f" · {_fmt_bytes(done)} / {_fmt_bytes(total)} · "
                         f"{_fmt_bytes(float(prog.get('rate_bytes_per_s') or 0))}/s · "
                         f"ETA {_fmt_eta(prog.get('eta_s'))}")
    counts = prog.get("counts") or {}
    states = Text(" ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "no progress yet")
    if prog.get("max_disk_util") is not None:
        states.append(f" · worst disk util {float(prog['max_disk_util']):.0%}")
    states.append(f" · URP {prog.get('under_replicated', '?')}")
    table = Table(box=None, show_header=True, pad_edge=False)
    for col in ("task", "action", "moving", "progress", "rate", "ETA"):
        table.add_column(col)
    running = [t for t in execution["tasks"].values() if t["state"] in ("IN_PROGRESS", "ABORTING")]
    running.sort(key=lambda t: -(int(t.get("bytes_total") or 0) - int(t.get("bytes_done") or 0)))
    for t in running[:top]:
        t_total = max(int(t.get("bytes_total") or 0), 1)
        moving = f"{t['source_replicas']}→{t['target_replicas'] or t.get('leader')}"
        table.add_row(t["key"], t["action"] if t["state"] == "IN_PROGRESS" else "aborting", moving,
                      ProgressBar(total=t_total, completed=min(int(t.get("bytes_done") or 0), t_total), width=24),
                      f"{_fmt_bytes(float(t.get('rate_bytes_per_s') or 0))}/s", _fmt_eta(task_eta(t)))
    return Group(head, ProgressBar(total=max(total, 1), completed=min(done, max(total, 1)), width=60), states, table)


def progress_line(execution: Mapping[str, Any]) -> str:
    """One plain line of progress (for logs and non-terminal output)."""
    prog = progress_json(execution)
    counts = " ".join(f"{k}={v}" for k, v in sorted((prog.get("counts") or {}).items()))
    return (f"execution {execution['id']} {execution['status']}: {counts} "
            f"{_fmt_bytes(int(prog.get('bytes_done') or 0))}/{_fmt_bytes(int(prog.get('bytes_total') or 0))} "
            f"rate {_fmt_bytes(float(prog.get('rate_bytes_per_s') or 0))}/s ETA {_fmt_eta(prog.get('eta_s'))}")
