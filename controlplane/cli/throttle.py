"""``guardian throttle list|explain``: the throttles in force and why (talks to a running service).

Both commands read ``--url`` (default ``$GUARDIAN_URL`` or http://127.0.0.1:8080) with a bearer token
(``--token`` or ``$GUARDIAN_TOKEN``). ``explain --snapshot S.json`` instead runs the planner offline
on a snapshot file (every disk's health, abnormal-behaviour queue and the decisions it would take),
with no service, cluster or network.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from controlplane.cli.api_client import ApiUnavailable, TokenOpt, UrlOpt, get_json
from controlplane.cli.common import err, out
from controlplane.files import read_snapshot
from domain import ContractError
from planners.protection import DiskHealth, ProtectionConfig, ProtectionInput, plan_throttles

throttle_app = typer.Typer(help="Partition-level throttle protection: what is throttled and why.",
                           no_args_is_help=True)

def _get(url: str, token: str | None) -> Any:
    try:
        return get_json(url, token)
    except ApiUnavailable as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None


def _mb(x: Any) -> str:
    return f"{float(x) / 1e6:.2f}" if isinstance(x, (int, float)) else "-"


@throttle_app.command("list")
def throttle_list(cluster_arg: Annotated[str | None, typer.Argument(metavar="[CLUSTER]",
                                                                     help="only this cluster (or --cluster)")] = None,
                  url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None,
                  cluster: Annotated[str | None, typer.Option(help="only this cluster")] = None,
                  as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Throttles in force (of CLUSTER, or every cluster): key, mechanism, target, rate, since, who and why."""
    if cluster_arg is not None and cluster is not None and cluster_arg != cluster:
        err.print(f"error: two clusters given ({cluster_arg!r} and --cluster {cluster!r})", markup=False)
        raise typer.Exit(2)
    cluster = cluster_arg or cluster
    query = "?" + urllib.parse.urlencode({"cluster": cluster}) if cluster else ""
    rows = _get(url.rstrip("/") + "/api/v1/throttles" + query, token)
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    if not rows:
        out.print(f"nothing throttled{f' on {cluster}' if cluster else ''}", markup=False)
        return
    table = Table(title=f"{len(rows)} throttle(s) in force")
    for col in ("cluster", "key", "kind", "target", "MB/s", "since", "by", "why"):
        table.add_column(col, overflow="fold")
    for t in rows:
        table.add_row(t["cluster"], t["key"], t["kind"], json.dumps(t["target"], sort_keys=True),
                      _mb(t["rate_bytes_per_s"]), str(t.get("since", "")), str(t.get("set_by", "")),
                      str(t.get("why", "")))
    out.print(table)


@throttle_app.command("explain")
def throttle_explain(
    cluster: Annotated[str | None, typer.Argument(help="cluster (omit with --snapshot)")] = None,
    key: Annotated[str | None, typer.Argument(help="one throttle's key: its evidence and history")] = None,
    url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None,
    snapshot: Annotated[Path | None, typer.Option("--snapshot", "-s", help="plan offline on this snapshot")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Why a cluster (or one throttle) is throttled: disk health, abnormal queue, evidence, history."""
    if snapshot is not None:
        data = _offline(snapshot)
    elif cluster is None:
        err.print("error: give a CLUSTER (service) or --snapshot FILE (offline)", markup=False)
        raise typer.Exit(2)
    else:
        data = _get(url.rstrip("/") + f"/api/v1/throttle/explain/{cluster}", token)
        if key is not None:
            match = [t for t in data.get("throttles", []) if t["key"] == key]
            history = [a for a in data.get("history", []) if a["subject"].get("key") == key]
            if not match and not history:
                err.print(f"error: no throttle {key!r} on cluster {cluster!r} (now or in the history)", markup=False)
                raise typer.Exit(1)
            data = {"cluster": cluster, "key": key, "throttle": match[0] if match else None, "history": history}
    if as_json:
        print(json.dumps(data, indent=2))
        return
    _print_explain(data)


def _print_explain(data: dict[str, Any]) -> None:
    if "key" in data:
        t = data.get("throttle")
        if t:
            out.print(f"{data['key']}: {t['kind']} {json.dumps(t['target'])} at {_mb(t['rate_bytes_per_s'])} MB/s "
                      f"since {t.get('since')}", markup=False)
            out.print(f"why: {t.get('why', '')}", markup=False)
            out.print(json.dumps(t.get("evidence", {}), indent=2), markup=False)
        else:
            out.print(f"{data['key']}: not in force now", markup=False)
        for a in data.get("history", []):
            out.print(f"  {a['at']} {a['who']} {a['type']}: {a.get('why', '')}", markup=False)
        return
    if data.get("skipped"):
        out.print(f"last evaluation skipped: {data['skipped']}", markup=False)
    elif data.get("evaluated") is False:
        out.print(f"cluster {data.get('cluster')} has not been evaluated yet", markup=False)
    if data.get("levers"):
        out.print(f"levers: {data['levers']}", markup=False)
    for d in data.get("disks", []):
        state = "UNHEALTHY" if d["unhealthy"] else "healthy"
        util = f"{d['util']:.2f}" if isinstance(d.get("util"), (int, float)) else "n/a"
        out.print(f"disk {d['broker']}:{d['path']} ({d['kind']}) {state} util {util} "
                  f"await {d.get('await_ms')} ms predicted {d.get('predicted_util')} — {d.get('reason', '')}",
                  markup=False)
        table = Table(show_header=True)
        for col in ("behaviour", "topic", "partition", "MB/s", "why"):
            table.add_column(col)
        for e in d.get("queue", []):
            table.add_row(e["behaviour"], e["topic"], str(e["partition"]), _mb(e["bytes_per_s"]), e["why"])
        if d.get("queue"):
            out.print(table)
    for a in data.get("applied", data.get("decisions", [])):
        out.print(f"{a['action']} {a['key']} ({a['kind']}) at {_mb(a['rate_bytes_per_s'])} MB/s: {a['why']}",
                  markup=False)
    for t in data.get("throttles", []):
        out.print(f"in force: {t['key']} {_mb(t['rate_bytes_per_s'])} MB/s (by {t.get('set_by')}): {t.get('why')}",
                  markup=False)
        mechanism = (t.get("evidence") or {}).get("mechanism")
        if mechanism:  # the lever and why, also once a relax step has rewritten `why`
            out.print(f"  lever: {mechanism}", markup=False)
    if data.get("throttles") or data.get("applied", data.get("decisions")):
        return
    if data.get("offline"):
        unhealthy = sum(1 for d in data.get("disks", []) if d["unhealthy"])
        out.print(f"nothing would be throttled on {data.get('cluster')}: {unhealthy} unhealthy disk(s) in this "
                  "snapshot", markup=False)
    elif "disks_evaluated" in data and not data.get("skipped"):
        hot = data.get("hottest")
        hottest = (f"; hottest {hot['broker']}:{hot['path']} util {hot['util']:.2f}"
                   if isinstance(hot, dict) and isinstance(hot.get("util"), (int, float)) else "")
        out.print(f"nothing throttled: {data['disks_evaluated']} disk(s) evaluated, "
                  f"{data.get('unhealthy_disks', 0)} unhealthy{hottest}", markup=False)
    else:
        out.print(f"nothing throttled on {data.get('cluster')}", markup=False)


def _offline(path: Path) -> dict[str, Any]:
    try:
        snap = read_snapshot(path)
    except ContractError as exc:
        err.print(f"error: invalid {exc.what}", markup=False)
        for problem in exc.problems:
            err.print(f"  {problem.path}: {problem.message}", markup=False)
        raise typer.Exit(2) from None
    config = ProtectionConfig()
    # offline there is no history: treat a disk above its high mark in this one snapshot as having been so
    # for k samples (what the service would conclude after k intervals like this one)
    health = {}
    for b in snap.brokers:
        for d in b.disks:
            th = config.thresholds_for(d.kind)
            if d.util > th.util_high or d.await_ms > th.await_high_ms:
                health[(b.id, d.path)] = DiskHealth(above=th.enter_samples - 1)
    plan = plan_throttles(snap, ProtectionInput(partition_throttle=True), health, config)
    disks = []
    for r in plan.reports:
        if not (r.health.unhealthy or r.queue):
            continue
        disks.append({"broker": r.disk[0], "path": r.disk[1], "kind": r.kind, "unhealthy": r.health.unhealthy,
                      "reason": r.health.reason, "util": r.util, "await_ms": r.await_ms,
                      "predicted_util": None if r.predicted_util is None else round(r.predicted_util, 3),
                      "queue": [{"behaviour": e.flow.behaviour, "topic": e.flow.topic, "partition": e.flow.partition,
                                 "bytes_per_s": e.flow.bytes_per_s, "why": e.why} for e in r.queue[:20]]})
    decisions = [{"action": d.action, "key": d.key, "kind": d.kind, "target": dict(d.target),
                  "rate_bytes_per_s": d.rate_bytes_per_s, "why": d.why} for d in plan.decisions]
    return {"cluster": snap.cluster, "offline": True, "disks": disks, "decisions": decisions,
            "note": "offline: partition-level throttle assumed available; no lineage, transfers or history"}

