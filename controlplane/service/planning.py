"""The service-side glue around the pure planners: run a planner kind by name with request parameters.

Every planner kind takes one more parameter here, ``load_basis``: ``"window"`` weighs each partition by
its rate in the snapshot (the last collection window, the default), ``"modelled_peak"`` by the traffic
model's next-day peak forecast (from ClickHouse, through the ``load_model`` port). The snapshot is
rewritten before planning (:mod:`planners.load_basis`) and the plan records the basis, the model run
and every overridden rate, so it can be reproduced and audited.

IDC placement needs every broker's IDC: a plan under an IDC placement policy (the cluster's default,
a topic's, or a ``placement`` parameter) on a snapshot with brokers of unknown IDC (no per-broker IDC
declared, no ``broker.rack`` the cluster's rack→IDC rule maps) is refused with the brokers named —
it could neither check nor enforce the policy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from controlplane.executor.release import ReleaseError, recorded_replicas, restore_plan
from domain import ClusterSnapshot, LoadBasis, Plan
from planners.load_basis import LOAD_BASES, MODELLED_PEAK, WINDOW, ModelledLoad, describe, with_modelled_peaks
from planners.registry import PLANNERS, PROPOSERS, Proposal

LoadModel = Callable[[str], ModelledLoad | None]
"""Port: cluster -> the latest traffic model's per-partition peak write rates (None: no model yet)."""


class PlanRequestError(ValueError):
    """Unknown planner kind or parameters it does not take."""


def load_snapshot(snapshot: ClusterSnapshot, basis: str, load_model: LoadModel | None) -> tuple[
        ClusterSnapshot, LoadBasis]:
    """The snapshot the planner weighs under ``basis`` and the record of it; :class:`PlanRequestError` for an
    unknown basis or a ``modelled_peak`` request without a traffic model for the cluster."""
    if basis not in LOAD_BASES:
        raise PlanRequestError(f"parameter 'load_basis' must be one of {', '.join(LOAD_BASES)}, got {basis!r}")
    if basis == WINDOW:
        return snapshot, LoadBasis(basis=WINDOW)
    model = load_model(snapshot.cluster) if load_model is not None else None
    if model is None or not model.bytes_in:
        raise PlanRequestError(f"load_basis {MODELLED_PEAK!r}: no traffic model for cluster {snapshot.cluster!r} "
                               "(no ClickHouse on this node, or the traffic job has not run)")
    return with_modelled_peaks(snapshot, model)


UNKNOWN_IDC = "unknown"
"""The IDC a collected snapshot gives a broker whose IDC nothing declares."""


def idc_refusal(snapshot: ClusterSnapshot, params: Mapping[str, Any]) -> str | None:
    """Why an IDC placement cannot be planned on ``snapshot`` (brokers without an IDC), None when it can
    or when no placement policy is in force."""
    wanted = bool(params.get("placement")) or bool(snapshot.default_placement) \
        or any(t.placement for t in snapshot.topics)
    if not wanted:
        return None
    missing = sorted(b.id for b in snapshot.brokers if not b.idc or b.idc == UNKNOWN_IDC)
    if not missing:
        return None
    shown = ", ".join(map(str, missing[:20])) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
    return (f"cluster {snapshot.cluster!r} has an IDC placement policy but the IDC of broker(s) {shown} is unknown: "
            "declare broker.rack on the brokers and the cluster's rack_to_idc rule (or an idc per broker)")


def make_proposal(snapshot: ClusterSnapshot, kind: str, params: Mapping[str, Any], *,
                  load_model: LoadModel | None = None) -> Proposal:
    """Run proposer ``kind`` (:data:`planners.registry.PROPOSERS`: every planner kind, plus ``pool-grow`` and
    ``migrate-idc``); :class:`PlanRequestError` for an unknown kind, bad params or an impossible request
    (unknown broker or topic, unsatisfiable placement, an IDC placement on brokers of unknown IDC:
    :func:`idc_refusal`). With a ``load_basis`` parameter the plans are made on that basis and record it
    (see the module doc)."""
    proposer = PROPOSERS.get(kind)
    if proposer is None:
        raise PlanRequestError(f"unknown planner kind {kind!r}; known: {', '.join(sorted([*PROPOSERS, 'restore']))}")
    refused = idc_refusal(snapshot, params)
    if refused is not None:
        raise PlanRequestError(refused)
    rest = dict(params)
    basis = rest.pop("load_basis", None)
    record: LoadBasis | None = None
    if basis is not None:
        if not isinstance(basis, str):
            raise PlanRequestError(f"parameter 'load_basis' must be a string, got {basis!r}")
        snapshot, record = load_snapshot(snapshot, basis, load_model)
    try:
        proposal = proposer(snapshot, rest)
    except (TypeError, ValueError) as exc:
        raise PlanRequestError(f"{kind}: {exc}") from None
    if record is None:
        return proposal
    return replace(proposal, plans=tuple(replace(p, load_basis=record, notes=(*p.notes, describe(record)))
                                         for p in proposal.plans))


def make_restore(snapshot: ClusterSnapshot, drain_execution: Mapping[str, Any]) -> tuple[
        Plan, dict[tuple[str, int], tuple[int, ...]]]:
    """The plan putting back what ``drain_execution`` (a finished drain's record) moved — replicas, log dirs
    and leadership, as ``guardian exec restore`` does — and the replica sets it recorded, which the plan is
    judged against (:func:`domain.check_plan`'s ``recorded``); :class:`PlanRequestError` when nothing can be
    restored."""
    existing = {(p.topic, p.partition) for t in snapshot.topics for p in t.partitions}
    try:
        plan, _, _ = restore_plan(snapshot.cluster, drain_execution, existing)
    except ReleaseError as exc:
        raise PlanRequestError(f"restore: {exc}") from None
    return plan, recorded_replicas(drain_execution)


def make_plan(snapshot: ClusterSnapshot, kind: str, params: Mapping[str, Any], *,
              load_model: LoadModel | None = None) -> Plan:
    """The one plan of planner ``kind`` (:data:`planners.registry.PLANNERS`) over ``snapshot``, as
    :func:`make_proposal` makes it."""
    if kind not in PLANNERS:
        raise PlanRequestError(f"unknown planner kind {kind!r}; known: {', '.join(sorted(PLANNERS))}")
    return make_proposal(snapshot, kind, params, load_model=load_model).plans[0]
