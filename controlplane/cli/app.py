"""``guardian``: the operator's command line, one module per command group. Every command has ``--help``.

Goal: one root Typer app that mounts the groups (``plan``, ``schema``, ``sim``, ``snapshot``,
``analytics``, ``throttle``, ``exec``, ``clusters``, ``topic``, ``lab``) and the top-level
``serve``/``cluster``/``token-hash``/``migrate-idc`` commands.
Method: each group lives in its own module of this package and exports its Typer app; the shared consoles,
exit codes and rejected-input reporting are in :mod:`controlplane.cli.common`. The analytics commands
(ClickHouse, PySpark) are mounted by a function so that heavy package is imported in one place only.
Guarantee: exit codes 0 ok, 1 violations / failed, 2 invalid input, 3 refused snapshot, 130 detached.
Cost: importing every group's module on start-up.
"""

from __future__ import annotations

import os

import typer

from controlplane.cli.anomalies import anomalies_app
from controlplane.cli.clusters import clusters_app
from controlplane.cli.exec import exec_app
from controlplane.cli.migrate import migrate_idc_cmd
from controlplane.cli.plan import plan_app
from controlplane.cli.read_local import clusters_app as _read_local_registered  # noqa: F401  (adds commands)
from controlplane.cli.schema import schema_app
from controlplane.cli.serve import cluster_cmd, serve_cmd, token_hash
from controlplane.cli.sim import sim_app
from controlplane.cli.snapshot import snapshot_app
from controlplane.cli.throttle import throttle_app
from controlplane.cli.tiered import tiered_app
from controlplane.cli.topic import topic_app
from controlplane.logs import LEVELS, setup_logging
from domain.redaction import register_secret
from kafkalab.cli import register as register_lab

app = typer.Typer(help="Guardian: control plane for a federation of Kafka clusters.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
app.add_typer(plan_app, name="plan")
app.add_typer(schema_app, name="schema")
app.add_typer(sim_app, name="sim")
app.add_typer(snapshot_app, name="snapshot")
analytics_app = typer.Typer(help="Audit analytics: ClickHouse (chdb) + PySpark traffic models.", no_args_is_help=True)
app.add_typer(analytics_app, name="analytics")
app.add_typer(throttle_app, name="throttle")
app.add_typer(tiered_app, name="tiered")
app.add_typer(exec_app, name="exec")
app.add_typer(anomalies_app, name="anomalies")
app.add_typer(clusters_app, name="clusters")
app.add_typer(topic_app, name="topic")
lab_app = typer.Typer(help="Real Apache Kafka brokers on this machine (KRaft, SASL_SSL, JBOD on loop devices, "
                           "JMX exporter + node_exporter): the reference Guardian is checked against.",
                      no_args_is_help=True)
register_lab(lab_app)
app.add_typer(lab_app, name="lab")
app.command("migrate-idc")(migrate_idc_cmd)
app.command("serve")(serve_cmd)
app.command("cluster")(cluster_cmd)
app.command("token-hash")(token_hash)


def _mount_analytics() -> None:
    """The one lazily imported subsystem of the CLI: the analytics commands (ClickHouse, PySpark)."""
    from analytics_spark.cli import register as register_analytics

    register_analytics(analytics_app)


_mount_analytics()


def main() -> None:
    """Entry point of the ``guardian`` console script: logging set up (level from ``$GUARDIAN_LOG_LEVEL``,
    default WARNING; ``serve`` sets its own), the token from ``$GUARDIAN_TOKEN`` registered as a secret."""
    level = os.environ.get("GUARDIAN_LOG_LEVEL", "WARNING").upper()
    setup_logging(level if level in LEVELS else "WARNING")
    register_secret(os.environ.get("GUARDIAN_TOKEN"))
    app()
