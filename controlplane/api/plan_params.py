"""Typed request members shared by the plan, migration and execution routes.

Goal: every planner kind's parameters and every execution setting checked before anything is planned
or proposed, with a 400 naming the bad field. Method: pydantic models — every planner kind's ``params``
(:data:`PARAMS_BY_KIND`: the models of :mod:`planners.params`, which the registry and the CLI use too, and
``restore``'s), the concurrency caps and the migration throttle an execution runs
under (the options of ``guardian exec run``: :class:`CapsIn`, :class:`MigrationThrottleIn`). :func:`checked`
validates a plain object against a model and turns each error into a problem at its JSON path under a
prefix (``$.params.count``); :func:`execution_settings` normalises the settings as the executor records
them (:mod:`controlplane.executor.settings`). Guarantee: what passes here builds a valid plan request or
throttle policy. Cost: pydantic-core validation, linear in the body.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from controlplane.api.errors import ApiError
from controlplane.api.schemas import StrictIn, int_in
from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.settings import SettingsError, throttle_settings
from domain.errors import json_path
from planners.params import PARAMS, problems

Rate = Annotated[float | str, Field(description="bytes/s: a number, or text such as '50MB', '1.5G', '800k'")]


class RestoreParams(StrictIn):
    """``restore``: put back what a drain moved, judged against the placement the drain recorded (a service
    kind: it needs the drain's execution record, so its model lives here, not in :mod:`planners.params`)."""

    drain_execution: int_in(1, 2**62, "the drain execution to undo (default: the cluster's latest finished "  # type: ignore[valid-type]
                                      "drain)") | None = None


PARAMS_BY_KIND: dict[str, type[BaseModel]] = {**PARAMS, "restore": RestoreParams}
"""Every planner kind's parameter model (:data:`planners.params.PARAMS`, the registry's and the CLI's too) and
``restore``'s: checked here first (400 naming ``$.params.<field>``)."""
RECORDED_KINDS = frozenset({"restore", "pool-grow", "migrate-idc"})
"""Kinds whose checked parameters are recorded with the plan (the executor reads them: a restore's drain
execution; the rest for audit)."""


class CapsIn(StrictIn):
    """Concurrency caps (``exec run --per-broker/--per-disk/--per-cluster``)."""

    per_broker: int_in(1, 10_000, "concurrent moves per broker") | None = None  # type: ignore[valid-type]
    per_disk: int_in(1, 10_000, "concurrent moves per disk") | None = None  # type: ignore[valid-type]
    per_cluster: int_in(1, 1_000_000, "concurrent moves in the cluster") | None = None  # type: ignore[valid-type]

    def given(self) -> dict[str, int]:
        """The caps set (an unset one keeps the executor's default)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class MigrationThrottleIn(StrictIn):
    """The migration throttle (``exec run --throttle/--util-threshold/--floor/--ceiling/--initial/--schedule/
    --nic/--follower-reads``); unset members keep the controller's configured policy."""

    mode: Literal["adaptive", "fixed"] | None = None
    fixed_rate: Rate | None = None
    util_threshold: Annotated[float, Field(ge=0.05, le=1.0, description="adaptive: keep disks under this util")] | \
        None = None
    floor: Rate | None = None
    ceiling: Rate | None = None
    initial: Rate | None = None
    schedule: Annotated[str, Field(max_length=2000, description="time-of-day ceilings (UTC), e.g. "
                                                                  "'22:00-06:00=200MB,06:00-22:00=40MB'")] | None = None
    nic_bytes_per_s: Rate | None = None
    follower_reads: Annotated[bool, Field(description="adaptive: a copy may read from a kept in-sync follower made "
                                                       "leader for the move (two leader changes per such partition)")] \
        | None = None


class ExecuteIn(StrictIn):
    """How to execute: caps and throttle, recorded on the execution (they survive a failover)."""

    caps: CapsIn | None = None
    throttle: MigrationThrottleIn | None = None


def checked(model: type[BaseModel], data: Any, prefix: tuple[str, ...]) -> Any:
    """``data`` validated by ``model``; a 400 problem naming each bad field under ``prefix``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        found = [{"path": path, "message": msg} for path, msg in problems(exc, prefix)]
        raise ApiError(400, "; ".join(f"{p['path']}: {p['message']}" for p in found), problems=found) from None


def execution_settings(body: ExecuteIn | None, base: MigrationRatePolicy | None, prefix: tuple[str, ...] = ()
                       ) -> tuple[dict[str, int], dict[str, Any]]:
    """(caps, execution options) from ``body``; the throttle checked against the executor's policy ``base``
    (400 naming ``$.throttle.<key>`` when, e.g., the floor would exceed the ceiling)."""
    if body is None:
        return {}, {}
    caps = body.caps.given() if body.caps is not None else {}
    if body.throttle is None:
        return caps, {}
    given = {k: v for k, v in body.throttle.model_dump().items() if v is not None}
    try:
        settings = throttle_settings(given, base)
    except SettingsError as exc:
        key = str(exc).split(":", 1)[0]
        path = json_path([*prefix, "throttle", *([key] if key in given else [])])
        raise ApiError(400, f"{path}: {str(exc).split(': ', 1)[-1]}",
                       problems=[{"path": path, "message": str(exc)}]) from None
    return caps, ({"throttle": settings} if settings else {})
