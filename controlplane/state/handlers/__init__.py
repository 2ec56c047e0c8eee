"""The replicated state machine's command handlers, one module per aggregate (clusters, plans, executions,
migrations, throttles, anomalies, staged uploads, and the group-wide counters), registered in :data:`HANDLERS`
by command type (:mod:`.registry`); importing this package registers them all."""

from controlplane.state.handlers import admin, anomalies, clusters, executions, migrations, plans, throttles, uploads
from controlplane.state.handlers.registry import HANDLERS, Handler, Ledger, missing

__all__ = ["HANDLERS", "Handler", "Ledger", "admin", "anomalies", "clusters", "executions", "migrations", "missing",
           "plans", "throttles", "uploads"]
