"""``guardian topic create NAME``: create a topic with a replica assignment placed by its expected load.

Goal: pre-allocation that ends in a topic. ``create`` runs the preallocate planner (each replica on the
valid disk of the topic's pool with the lowest projected load; the IDC placement, rack spread and
capacity held) and creates the topic with CreateTopics carrying exactly that assignment, then asks each
broker to keep its replica in the planned log dir. Two ways, like the other commands: through a
controller (``--url``, ``--token``: ``POST /api/v1/topics``, which plans over the controller's latest
snapshot with the cluster's pools and policies and records the action), or standalone
(``--bootstrap-servers`` with Kafka security flags, or ``--endpoints-file``: one live snapshot,
:mod:`controlplane.cli.live_snapshot`, then the Kafka port's ``create_topic``). Exit codes: 0 created, 1
refused (the topic exists, no valid placement, the cluster refused), 2 bad input.
"""

from __future__ import annotations

from typing import Annotated, Any, NoReturn

import typer

from controlplane.cli.api_client import ApiUnavailable, TokenOpt, post_json
from controlplane.cli.common import EXIT_INVALID_INPUT, EXIT_VIOLATIONS, err, out
from controlplane.cli.connect_options import ConnectOptions
from controlplane.cli.live_snapshot import collect_snapshot
from controlplane.cli.migrate import UrlOpt, parse_placement
from controlplane.cli.option_set import option_set
from kafkaio.admin import KafkaAdmin
from kafkaio.endpoints import EndpointsError
from kafkaio.errors import AdminError, KafkaAuthError
from planners import NewTopic, PlannerError, PreallocateOptions, plan_preallocation

topic_app = typer.Typer(help="Topics: create one with a pre-allocated replica assignment.", no_args_is_help=True)


def _configs(pairs: list[str] | None) -> dict[str, str]:
    out_: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            err.print(f"error: --config: expected key=value, got {pair!r}", markup=False)
            raise typer.Exit(EXIT_INVALID_INPUT)
        out_[key.strip()] = value
    return out_


def _fail(message: str, code: int = EXIT_VIOLATIONS) -> NoReturn:
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(code)


@topic_app.command("create")
@option_set(ConnectOptions, ("cluster",))
def topic_create(
    connect: ConnectOptions,
    name: Annotated[str, typer.Argument(help="topic name")],
    partitions: Annotated[int, typer.Option(min=1, max=100_000)],
    expected_bytes_in_per_s: Annotated[float, typer.Option(min=0.0, help="expected bytes/s produced to it")],
    replication_factor: Annotated[int, typer.Option("--replication-factor", "--rf", min=1, max=16)] = 3,
    pool: Annotated[str, typer.Option(help="resource pool whose brokers hold it")] = "shared",
    placement: Annotated[str | None, typer.Option(help="IDC placement, idc=count,... (default: the cluster's "
                                                       "policy)")] = None,
    config: Annotated[list[str] | None, typer.Option("--config", help="topic config key=value (repeatable)")]
    = None,
    url: UrlOpt = None,
    token: TokenOpt = None,
    collect_rounds: Annotated[int, typer.Option(min=1, max=10, help="standalone: collection rounds before "
                                                                    "planning (rates need 2)")] = 2,
) -> None:
    """Plan NAME's assignment from its expected traffic and create it with exactly that assignment."""
    configs = _configs(config)
    policy = parse_placement(placement) if placement else None
    if url is not None and not (connect.bootstrap_servers or connect.endpoints_file):
        body: dict[str, Any] = {"cluster": connect.cluster, "name": name, "partitions": partitions,
                                "replication_factor": replication_factor,
                                "expected_bytes_in_per_s": expected_bytes_in_per_s, "pool": pool, "configs": configs,
                                **({"placement": policy} if policy else {})}
        try:
            created = post_json(url.rstrip("/") + "/api/v1/topics", token, body, why=f"guardian topic create {name}")
        except ApiUnavailable as exc:
            _fail(str(exc))
        assignment = {int(p): r for p, r in created["assignment"].items()}
    else:
        assignment = _standalone(connect, NewTopic(name=name, partitions=partitions,
                                                   replication_factor=replication_factor,
                                                   bytes_in_per_s=expected_bytes_in_per_s, pool=pool,
                                                   placement=policy), configs, collect_rounds)
    out.print(f"topic {name} created on {connect.cluster}: {partitions} partition(s), RF {replication_factor}",
              markup=False)
    out.print("replica assignment: " + ",".join(":".join(str(b) for b in assignment[p]) for p in sorted(assignment)),
              markup=False)


def _standalone(connect: ConnectOptions, request: NewTopic, configs: dict[str, str], rounds: int
                ) -> dict[int, list[int]]:
    try:
        endpoints = connect.endpoints()
    except EndpointsError as exc:
        _fail(str(exc), EXIT_INVALID_INPUT)
    snap = collect_snapshot(endpoints, rounds)
    try:
        result = plan_preallocation(snap, request, PreallocateOptions())
    except PlannerError as exc:
        _fail(f"cannot place topic {request.name!r}: {exc}")
    assignment = {p.partition: list(p.replicas) for p in result.topic.partitions}
    admin = KafkaAdmin.for_endpoints(endpoints, client_id="guardian-cli")
    try:
        admin.create_topic(request.name, assignment, configs)
        dirs = {(request.name, p.partition, b): d for p in result.topic.partitions
                for b, d in zip(p.replicas, p.log_dirs, strict=True) if d}
        for (t, p, b), why in sorted(admin.alter_log_dirs(dirs).items()):
            if why:
                err.print(f"warning: {t}-{p} on broker {b} stays in its first log dir: {why}", markup=False)
    except KafkaAuthError as exc:
        _fail(str(exc), EXIT_INVALID_INPUT)
    except AdminError as exc:
        _fail(str(exc))
    finally:
        admin.close()
    return assignment
