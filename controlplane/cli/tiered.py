"""``guardian tiered partitions|show|events|segment``: the remote-storage metadata a running node holds.

Reads ``/api/v1/tiered/...`` of ``--url`` (default ``$GUARDIAN_URL`` or http://127.0.0.1:8080) with a
viewer token (``--token`` or ``$GUARDIAN_TOKEN``); ``--ca-file`` (or ``$GUARDIAN_CA_FILE``) is the CA to
verify an https API's certificate against (the nodes' own CA); ``--json`` prints the raw answer.
"""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import quote

import typer
from rich.table import Table

from controlplane.cli.api_client import ApiUnavailable, TokenOpt, UrlOpt, get_json
from controlplane.cli.common import err, out

tiered_app = typer.Typer(help="Remote-storage (tiered) metadata: partitions, live segments, event groups.",
                         no_args_is_help=True)
JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
CaOpt = Annotated[str | None, typer.Option("--ca-file", envvar="GUARDIAN_CA_FILE",
                                           help="CA (PEM) to verify an https API's certificate")]
_STATES = {1: "copy_started", 2: "copy_finished", 3: "delete_started", 4: "delete_finished"}


def _base(url: str, cluster: str, topic_id: str, partition: int) -> str:
    names = f"{quote(cluster, safe='')}/{quote(topic_id, safe='')}/{partition}"
    return f"{url.rstrip('/')}/api/v1/tiered/partitions/{names}"


def _get(url: str, token: str | None, ca_file: str | None) -> Any:
    try:
        return get_json(url, token, ca_file)
    except ApiUnavailable as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(1) from None


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=True))


@tiered_app.command("partitions")
def partitions(url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None,
               cluster: Annotated[str | None, typer.Option(help="only this cluster")] = None,
               limit: Annotated[int, typer.Option(min=1, max=10000)] = 1000, as_json: JsonOpt = False,
               ca_file: CaOpt = None) -> None:
    """Partitions with tiered metadata and their counters."""
    query = f"?limit={limit}" + (f"&cluster={quote(cluster, safe='')}" if cluster else "")
    rows = _get(url.rstrip("/") + "/api/v1/tiered/partitions" + query, token, ca_file)
    if as_json:
        _print_json(rows)
        return
    table = Table("cluster", "topic id", "partition", "epoch", "groups", "events", "live segments", "remote MB")
    for r in rows:
        table.add_row(r["cluster"], r["topic_id"], str(r["partition"]), str(r["leader_epoch"]), str(r["groups"]),
                      str(r["events"]), str(r["live_segments"]), f"{r['remote_bytes'] / 1e6:.1f}")
    out.print(table)


@tiered_app.command("show")
def show(cluster: str, topic_id: str, partition: int, url: UrlOpt = "http://127.0.0.1:8080",
         token: TokenOpt = None, as_json: JsonOpt = False, ca_file: CaOpt = None) -> None:
    """One partition's live segments (the state a new replica starts from)."""
    body = _get(_base(url, cluster, topic_id, partition), token, ca_file)
    if as_json:
        _print_json(body)
        return
    out.print(f"{cluster}/{topic_id}/{partition}: epoch {body['leader_epoch']}, last group {body['last_group_id']}, "
              f"{body['live_segments']} live segments, {body['remote_bytes'] / 1e6:.1f} MB remote", markup=False)
    table = Table("segment", "state", "offsets", "epoch", "bytes", "remote path")
    for s in body["segments"]:
        table.add_row(str(s["segment_id"]), _STATES.get(s["state"], str(s["state"])),
                      f"{s['start_offset']}-{s['end_offset']}", str(s["leader_epoch"]), str(s["size_bytes"]),
                      s["remote_path"])
    out.print(table)


@tiered_app.command("events")
def events(cluster: str, topic_id: str, partition: int, url: UrlOpt = "http://127.0.0.1:8080",
           token: TokenOpt = None, after: Annotated[int, typer.Option(help="groups after this id")] = 0,
           limit: Annotated[int, typer.Option(min=1, max=10000)] = 100, as_json: JsonOpt = False,
           ca_file: CaOpt = None) -> None:
    """The partition's event groups after a group id."""
    body = _get(_base(url, cluster, topic_id, partition) + f"/events?after={after}&limit={limit}", token, ca_file)
    if as_json:
        _print_json(body)
        return
    table = Table("group", "epoch", "event", "segment", "offsets", "bytes")
    for g in body["groups"]:
        for e in g["events"]:
            table.add_row(str(g["group_id"]), str(g["leader_epoch"]), _STATES.get(e["kind"], str(e["kind"])),
                          str(e["segment_id"]), f"{e['start_offset']}-{e['end_offset']}", str(e["size_bytes"]))
    out.print(table)
    if body["more"]:
        out.print("(more: --after the last group id)", markup=False)


@tiered_app.command("segment")
def segment(topic: Annotated[str, typer.Option("--topic", help="topic name (as Kafka gave it) or topic id")],
            partition: Annotated[int, typer.Option("--partition", min=0)],
            offset: Annotated[int, typer.Option("--offset", min=0)],
            epoch: Annotated[int | None, typer.Option("--epoch", min=0, help="leader epoch (KIP-405's lookup)")] = None,
            cluster: Annotated[str | None, typer.Option("--cluster", help="only this cluster")] = None,
            url: UrlOpt = "http://127.0.0.1:8080", token: TokenOpt = None, as_json: JsonOpt = False,
            ca_file: CaOpt = None) -> None:
    """Which remote segment holds an offset (at a leader epoch): Kafka's segment id, offsets, epochs."""
    query = f"?topic={quote(topic, safe='')}&partition={partition}&offset={offset}"
    query += (f"&epoch={epoch}" if epoch is not None else "") + (f"&cluster={quote(cluster, safe='')}" if cluster
                                                                 else "")
    body = _get(url.rstrip("/") + "/api/v1/tiered/segment" + query, token, ca_file)
    if as_json:
        _print_json(body)
        return
    s = body["segment"]
    kafka = s.get("kafka") or {}
    epochs = ", ".join(f"{e}@{o}" for e, o in kafka.get("epochs", [])) or str(s["leader_epoch"])
    out.print(f"{body['cluster']}/{body['topic_id']}/{body['partition']} offset {offset}: segment "
              f"{kafka.get('uuid') or s['segment_id']} ({_STATES.get(s['state'], s['state'])}), offsets "
              f"{s['start_offset']}-{s['end_offset']}, leader epochs {epochs}, {s['size_bytes']} bytes, "
              f"copied by broker {kafka.get('broker', '?')}", markup=False)
