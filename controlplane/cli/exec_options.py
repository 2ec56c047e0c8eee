"""The option set shared by ``guardian exec run|drain|restore``, declared once.

Goal: the three executing commands take the same connection (:class:`~controlplane.cli.connect_options.
ConnectOptions`: an endpoints file, or bootstrap servers with Kafka-style security flags), state,
ordering, throttle and concurrency options, so adding one is one field here, not three edited signatures.
Method: :class:`ExecOptions` extends the connection option set with the executor's options; the
:func:`exec_options` decorator (an :func:`~controlplane.cli.option_set.option_set`) gives a command the
signature Typer reads: the endpoints file and cluster first, then the command's own parameters, then
every other field; at call time it gathers the shared values into one ``ExecOptions`` and passes it as
the command's first argument.
Guarantee: every decorated command accepts exactly the fields of ``ExecOptions``, with the same names,
flags, bounds and defaults. Cost: one signature rewrite per command at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from controlplane.cli.connect_options import ConnectOptions
from controlplane.cli.option_set import option_set
from controlplane.executor.tasks import ORDERINGS

StateOpt = Annotated[Path | None, typer.Option("--state-file", help="local state file (default "
                                                                     ".guardian/exec-CLUSTER.json)")]
OrderingOpt = Annotated[str, typer.Option(help=f"task order: {', '.join(ORDERINGS)}")]
ThrottleOpt = Annotated[str, typer.Option(help="adaptive, or fixed:RATE (e.g. fixed:50MB)")]
UtilOpt = Annotated[float, typer.Option(min=0.05, max=1.0, help="adaptive: keep disks under this util")]
ScheduleOpt = Annotated[str, typer.Option(help="time-of-day ceilings (UTC), e.g. '22:00-06:00=200MB,06:00-22:00=40MB'")]
FloorOpt = Annotated[str, typer.Option(help="lowest migration rate per broker")]
CeilingOpt = Annotated[str, typer.Option(help="highest migration rate per broker")]
InitialOpt = Annotated[str, typer.Option(help="adaptive: rate before any measurement")]
PerBrokerOpt = Annotated[int | None, typer.Option(min=1, help="concurrent moves per broker")]
PerDiskOpt = Annotated[int | None, typer.Option(min=1, help="concurrent moves per disk")]
PerClusterOpt = Annotated[int | None, typer.Option(min=1, help="concurrent moves in the cluster")]
IntervalOpt = Annotated[float, typer.Option(min=0.05, help="seconds between reconcile passes")]
QuietOpt = Annotated[bool, typer.Option(help="no live progress bar (one line per pass)")]
FollowerReadsOpt = Annotated[bool, typer.Option(help="adaptive: a copy whose leader's disk is the busier may read "
                                                    "from a kept in-sync follower made leader for the move (two "
                                                    "leader changes per such partition)")]
LeaseOpt = Annotated[int, typer.Option(min=2, help="the cluster's execution lease expires after this many intervals "
                                                   "without renewal (at least 5 s)")]
NicOpt = Annotated[str, typer.Option(help="adaptive: network capacity per broker and direction (e.g. 1.25G); "
                                          "empty ignores network headroom")]


@dataclass(frozen=True, kw_only=True)
class ExecOptions(ConnectOptions):
    """Options of ``exec run|drain|restore``: add a field here and all three commands take it."""

    state_file: StateOpt = None
    ordering: OrderingOpt = "small_first"
    throttle: ThrottleOpt = "adaptive"
    util_threshold: UtilOpt = 0.7
    schedule: ScheduleOpt = ""
    floor: FloorOpt = "1MB"
    ceiling: CeilingOpt = "400MB"
    initial: InitialOpt = "20MB"
    per_broker: PerBrokerOpt = None
    per_disk: PerDiskOpt = None
    per_cluster: PerClusterOpt = None
    interval: IntervalOpt = 1.0
    quiet: QuietOpt = False
    nic: NicOpt = ""
    follower_reads: FollowerReadsOpt = False
    lease_intervals: LeaseOpt = 10


LEADING = ("endpoints_file", "cluster")
"""Shared options listed before a command's own options in ``--help``; the others come after."""

exec_options = option_set(ExecOptions, LEADING)
"""Give ``command(options: ExecOptions, **own)`` the shared options as Typer parameters of its own."""
