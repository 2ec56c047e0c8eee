"""The option set shared by ``guardian exec run|drain|restore``, declared once.

Goal: the three executing commands take the same connection, state, ordering, throttle and concurrency
options, so adding one (e.g. Kafka security flags) is one field here, not three edited signatures.
Method: :class:`ExecOptions` is a frozen dataclass whose fields carry their Typer declaration
(``Annotated[type, typer.Option(...)]``) and their default. The :func:`exec_options` decorator gives a
command the signature Typer reads: the endpoints file and cluster first, then the command's own
parameters, then every other field (the ``--help`` order these commands always had); at call time it
gathers the shared values into one ``ExecOptions`` and passes it as the command's first argument.
Guarantee: every decorated command accepts exactly the fields of ``ExecOptions``, with the same names,
flags, bounds and defaults. Cost: one signature rewrite per command at import.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Annotated, Any, get_type_hints

import typer

from controlplane.executor.tasks import ORDERINGS

EndpointsOpt = Annotated[Path, typer.Option("--endpoints-file", "-e", help="endpoints JSON (kafkasim.endpoints/v1 "
                                                                           "shape)")]
ClusterOpt = Annotated[str, typer.Option("--cluster", "-c", help="cluster name in the endpoints file")]
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
NicOpt = Annotated[str, typer.Option(help="adaptive: network capacity per broker and direction (e.g. 1.25G); "
                                          "empty ignores network headroom")]


@dataclass(frozen=True)
class ExecOptions:
    """Options of ``exec run|drain|restore``: add a field here and all three commands take it."""

    endpoints_file: EndpointsOpt
    cluster: ClusterOpt
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


LEADING = ("endpoints_file", "cluster")
"""Shared options listed before a command's own options in ``--help``; the others come after."""


def _shared_parameters() -> list[inspect.Parameter]:
    hints = get_type_hints(ExecOptions, include_extras=True)
    return [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=hints[f.name],
                              default=inspect.Parameter.empty if f.default is MISSING else f.default)
            for f in fields(ExecOptions)]


def exec_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command(options: ExecOptions, **own)`` the shared options as Typer parameters of its own."""
    shared = _shared_parameters()
    names = {p.name for p in shared}
    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
           for p in list(inspect.signature(command, eval_str=True).parameters.values())[1:]]
    clash = names & {p.name for p in own}
    if clash:
        raise TypeError(f"{command.__name__}: parameters {sorted(clash)} are already shared exec options")
    params = [p for p in shared if p.name in LEADING] + own + [p for p in shared if p.name not in LEADING]

    def run(**kwargs: Any) -> None:
        options = ExecOptions(**{name: kwargs.pop(name) for name in names})
        command(options, **kwargs)

    run.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    run.__name__, run.__qualname__, run.__doc__ = command.__name__, command.__qualname__, command.__doc__
    run.__module__ = command.__module__
    return run
