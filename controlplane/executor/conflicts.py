"""Why an executor refuses to start: another execution, another executor's lease, moves it does not own.

Goal: one exception family the callers map once (the CLI to exit code 1, the API to 409, the service's
action log to a recorded refusal). Method: :class:`ExecutionConflict` and its subclasses carry a message
naming what is in the way. Guarantee: raised before anything on the cluster was changed by the refused
start. Cost: none.
"""

from __future__ import annotations

from collections.abc import Mapping

from kafkaio.types import TP, Reassignment

MAX_LISTED = 20


class ExecutionConflict(RuntimeError):
    """Another execution is active on the cluster (or something else rules a start out)."""


class ForeignReassignments(ExecutionConflict):
    """Reassignments this executor does not own are in flight (Cruise Control's rule: do not start then)."""

    def __init__(self, cluster: str, foreign: Mapping[TP, Reassignment]) -> None:
        listed = ", ".join(f"{t}-{p} (adding {list(r.adding)}, removing {list(r.removing)})"
                           for (t, p), r in sorted(foreign.items())[:MAX_LISTED])
        more = f" and {len(foreign) - MAX_LISTED} more" if len(foreign) > MAX_LISTED else ""
        super().__init__(f"cluster {cluster!r} has {len(foreign)} reassignment(s) in flight that this executor does "
                         f"not own: {listed}{more}; nothing started — wait for them to finish or cancel them")
        self.foreign = dict(foreign)
