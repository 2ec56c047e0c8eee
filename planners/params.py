"""Planner parameters: one typed model per planner kind, used by the registry, the API and the CLI alike.

Goal: each rule about a planner's parameters (a default, a bound, an alias such as rebalance's ``target`` /
``threshold`` / ``tolerance``) written once. Method: a pydantic model per kind (:data:`PARAMS`), all on
:class:`Params` — strict (no coercion: ``"1"`` is not an integer, ``true`` is not a number; an integral
JSON number such as ``3.0`` is an integer), closed (an unknown parameter is refused), finite — with the
bounds every kind takes in :class:`BoundsParams`; each model builds its planner's options
(``.options()``). :func:`parse_params` validates a plain mapping (an API request's ``params``, a recorded
plan's) and raises :class:`ParamsError` naming each bad field by JSON path; the API validates with the same
models and answers 400 naming ``$.params.<field>``; the CLI builds the model from its options.

Guarantee: pure (pydantic only; no I/O). What validates builds planner options the planner accepts.
Cost: pydantic-core validation, linear in the parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from domain.errors import json_path
from planners.disk_balance import BalanceOptions
from planners.drain import DrainOptions
from planners.idc_migration import MigrationOptions
from planners.leaders import LeaderOptions
from planners.pool_resize import FREE_POOL, ResizeOptions
from planners.preallocate import NewTopic, PreallocateOptions
from planners.read_local import ReadLocalOptions
from planners.workspace import Bounds

INT32_MAX = 2**31 - 1
NAME_PATTERN = r"^[A-Za-z0-9._:/@-]+$"
"""What the replicated commands accept as a name (topics, pools, IDCs, keys)."""


def _integral(value: Any) -> Any:
    """JSON Schema counts ``3.0`` as an integer; strict mode would not: pass it on as ``3``."""
    return int(value) if type(value) is float and value.is_integer() else value


def int_in(low: int, high: int, description: str | None = None) -> Any:
    """A strict integer in ``[low, high]`` that also takes an integral JSON number (``3.0``), never a string
    or a boolean (the bounds sit on the integer, so the JSON schema says minimum/maximum). The API's request
    models use it too (:mod:`controlplane.api.schemas`)."""
    return Annotated[int, Field(ge=low, le=high, description=description), BeforeValidator(_integral)]


Name = Annotated[str, Field(min_length=1, max_length=200, pattern=NAME_PATTERN)]
BrokerId = int_in(0, INT32_MAX, "Kafka broker id (int32, >= 0)")


class ParamsError(TypeError):
    """Parameters a planner kind does not take: each problem named by JSON path (``$.threshold: ...``)."""


class Params(BaseModel):
    """Base of every planner-parameter model: strict types, closed, finite, frozen."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True, frozen=True)


P = TypeVar("P", bound=Params)


class BoundsParams(Params):
    """Bounds every planner kind takes, and the load basis the service plans on."""

    max_bytes: int_in(0, 2**62, "most bytes one plan (step) copies") | None = None  # type: ignore[valid-type]
    max_partitions: int_in(0, 10**7, "most partitions one plan (step) moves") | None = None  # type: ignore[valid-type]
    max_moves: int_in(0, 10**7, "alias of max_partitions") | None = None  # type: ignore[valid-type]
    capacity_headroom: Annotated[float, Field(ge=0, lt=1, description="fraction of each disk kept free")] = 0.10
    load_basis: Literal["window", "modelled_peak"] | None = None
    """Read by the service (:mod:`controlplane.service.planning`) before the planner runs."""

    def bounds(self) -> Bounds:
        """The planner bounds (``max_partitions`` wins over its alias ``max_moves``)."""
        return Bounds(max_bytes=self.max_bytes,
                      max_partitions=self.max_partitions if self.max_partitions is not None else self.max_moves,
                      capacity_headroom=float(self.capacity_headroom))


DEFAULT_BALANCE_TARGET = 1.10
"""Rebalance: the peak/mean every pool ends at or under when no target is given."""
BalanceTarget = Annotated[float, Field(ge=1.0, description="peak/mean every pool ends at or under (>= 1.0)")]


class RebalanceParams(BoundsParams):
    """``rebalance``: disk-load balance; ``target`` (aliases ``threshold``, ``tolerance``; default 1.10: the
    peak/mean every pool ends at or under, and the plan stops there), ``floor`` (default 0.30: no rebalance
    while a pool's hottest disk is at or under this utilisation), ``evacuate_dead`` (default false: replicas
    on dead brokers stay, and the notes say so)."""

    target: BalanceTarget | None = None
    threshold: BalanceTarget | None = None
    tolerance: BalanceTarget | None = None
    floor: Annotated[float, Field(ge=0.0, le=1.0, description="no rebalance while the hottest disk is at or "
                                                                "under this utilisation")] = 0.30
    evacuate_dead: bool = False

    @property
    def goal(self) -> float:
        """The target peak/mean: ``threshold``, else ``target``, else ``tolerance``, else 1.10."""
        for value in (self.threshold, self.target, self.tolerance):
            if value is not None:
                return float(value)
        return DEFAULT_BALANCE_TARGET

    def options(self) -> BalanceOptions:
        """The balancer's options."""
        return BalanceOptions(bounds=self.bounds(), threshold=self.goal, evacuate_dead=self.evacuate_dead,
                              floor=float(self.floor))


class LeadersParams(BoundsParams):
    """``leaders``: leader balance within ``tolerance`` (default 1.05) of the mean."""

    tolerance: Annotated[float, Field(ge=1.0, description="stop within this factor of the mean")] = 1.05

    def options(self) -> LeaderOptions:
        """The leader balancer's options."""
        return LeaderOptions(bounds=self.bounds(), tolerance=float(self.tolerance))


class DrainParams(BoundsParams):
    """``drain``: decommission ``brokers``."""

    brokers: Annotated[list[BrokerId], Field(  # type: ignore[valid-type]
        min_length=1, description="the brokers to drain")]

    def options(self) -> DrainOptions:
        """The drain planner's options."""
        return DrainOptions(bounds=self.bounds())


class PoolShrinkParams(BoundsParams):
    """``pool-shrink``: shrink ``pool`` by draining ``brokers`` or the ``count`` cheapest into ``free_pool``."""

    pool: Name
    brokers: list[BrokerId] = Field(default_factory=list)  # type: ignore[valid-type]
    count: int_in(0, 10_000, "or: drain this many brokers (cheapest to move)") = 0  # type: ignore[valid-type]
    free_pool: Name = FREE_POOL

    def options(self) -> ResizeOptions:
        """The resize planner's options."""
        return ResizeOptions(bounds=self.bounds(), free_pool=self.free_pool)


class PoolGrowParams(BoundsParams):
    """``pool-grow``: take ``count`` brokers of ``free_pool`` into ``pool`` and fill them."""

    pool: Name
    count: int_in(1, 10_000, "brokers to take from the free pool")  # type: ignore[valid-type]
    free_pool: Name = FREE_POOL

    def options(self) -> ResizeOptions:
        """The resize planner's options."""
        return ResizeOptions(bounds=self.bounds(), free_pool=self.free_pool)


class PreallocateParams(BoundsParams):
    """``preallocate``: the assignment of new topic ``topic``; ``traffic_model`` (topic -> bytes/s) when no
    rate is given."""

    topic: Name
    partitions: int_in(1, 1_000_000, "partitions of the new topic")  # type: ignore[valid-type]
    replication_factor: int_in(1, 10, "replicas per partition") = 3  # type: ignore[valid-type]
    bytes_in_per_s: Annotated[float, Field(ge=0)] | None = None
    pool: Name = "shared"
    placement: dict[Name, int_in(1, 16)] | None = None  # type: ignore[valid-type]
    traffic_model: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)

    def request(self) -> NewTopic:
        """The new topic asked for."""
        return NewTopic(name=self.topic, partitions=self.partitions, replication_factor=self.replication_factor,
                        bytes_in_per_s=None if self.bytes_in_per_s is None else float(self.bytes_in_per_s),
                        pool=self.pool, placement=self.placement)

    def options(self) -> PreallocateOptions:
        """The pre-allocation planner's options."""
        return PreallocateOptions(bounds=self.bounds(), traffic_model=dict(self.traffic_model))


class ReadLocalParams(BoundsParams):
    """``read-local`` (KIP-392): ``demand`` (topic -> {IDC: fetch bytes/s}, as ``GET /clusters/{name}/read-local``
    reports it) and ``threshold`` (bytes/s an IDC must read from a topic, default 1 MiB/s)."""

    demand: dict[str, dict[str, Annotated[float, Field(ge=0)]]]
    threshold: Annotated[float, Field(ge=0, description="bytes/s an IDC must read from a topic")] = 1_048_576.0

    def options(self) -> ReadLocalOptions:
        """The read-local planner's options."""
        return ReadLocalOptions(bounds=self.bounds(), threshold=float(self.threshold))


class MigrateIdcParams(BoundsParams):
    """``migrate-idc``: move ``topics`` (or every topic of ``pool``) to the IDC ``placement`` in steps that keep
    ``min_insync`` replicas in sync."""

    placement: Annotated[dict[Name, int_in(1, 16)], Field(min_length=1,  # type: ignore[valid-type]
                                                          description="IDC -> replicas required there")]
    topics: list[Name] = Field(default_factory=list)
    pool: Name | None = None
    min_insync: int_in(1, 16, "in-sync replicas every partition keeps at every instant") = 2  # type: ignore[valid-type]

    def options(self) -> MigrationOptions:
        """The IDC migration planner's options."""
        return MigrationOptions(bounds=self.bounds(), min_insync=self.min_insync)


PARAMS: dict[str, type[BoundsParams]] = {
    "rebalance": RebalanceParams, "leaders": LeadersParams, "drain": DrainParams, "pool-shrink": PoolShrinkParams,
    "preallocate": PreallocateParams, "read-local": ReadLocalParams, "pool-grow": PoolGrowParams,
    "migrate-idc": MigrateIdcParams,
}
"""Planner kind -> its parameter model (every kind of :data:`planners.registry.PROPOSERS`)."""


def problems(exc: ValidationError, prefix: tuple[str | int, ...] = ()) -> list[tuple[str, str]]:
    """``(JSON path, message)`` of each problem of a validation error, under ``prefix``."""
    return [(json_path([*prefix, *e["loc"]]), e["msg"]) for e in exc.errors(include_url=False)]


def parse_params(model: type[P], params: Mapping[str, Any]) -> P:
    """``params`` validated by ``model``; :class:`ParamsError` names each bad field (``$.count: ...``)."""
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        raise ParamsError("; ".join(f"{path}: {msg}" for path, msg in problems(exc))) from None
