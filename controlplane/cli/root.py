"""The ``guardian`` root command: its groups loaded on demand, ``--version``, process set-up.

Goal
    ``guardian --help`` and ``guardian --version`` answer at once, and a command imports only what it uses:
    ``guardian plan rebalance`` never loads the controller (FastAPI, the executor, SciPy).

Method
    :data:`ENTRIES` names every group and top-level command with its one-line help and a loader that
    imports its module. :func:`lazy_app` builds the root as a :class:`LazyGroup` holding a stub per entry;
    the stub is replaced by the loaded command the first time the name is resolved (listing the root's
    help shows the stubs' lines). :func:`eager_app` loads every entry into one Typer app (tests drive it
    with ``CliRunner``; ``tests/unit/test_cli_root.py`` checks the one-line helps match the loaded ones).
    Logging and the ``$GUARDIAN_TOKEN`` secret are set up when a command runs, not for ``--help``.

Guarantee
    The same commands, options and exit codes whichever way the root is built.

Cost
    ``guardian --help``/``--version``: Typer and Click only (~0.2 s); a command: its own group's imports.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from controlplane import DISTRIBUTION, __version__

HELP = "Guardian: control plane for a federation of Kafka clusters."

Loaded = typer.Typer | Callable[..., Any]


@dataclass(frozen=True)
class Entry:
    """One group (a Typer app) or top-level command (a function) of the root, loaded by ``load``."""

    name: str
    help: str
    load: Callable[[], Loaded]


def _plan() -> Loaded:
    from controlplane.cli.plan import plan_app
    from controlplane.cli.read_local import plan_app as with_read_local  # adds `plan read-local` to plan_app
    assert with_read_local is plan_app
    return plan_app


def _schema() -> Loaded:
    from controlplane.cli.schema import schema_app
    return schema_app


def _sim() -> Loaded:
    from controlplane.cli.sim import sim_app
    return sim_app


def _snapshot() -> Loaded:
    from controlplane.cli.snapshot import snapshot_app
    return snapshot_app


def _analytics() -> Loaded:
    from analytics_spark.cli import register

    app = typer.Typer(help=ANALYTICS_HELP, no_args_is_help=True)
    register(app)
    return app


def _throttle() -> Loaded:
    from controlplane.cli.throttle import throttle_app
    return throttle_app


def _tiered() -> Loaded:
    from controlplane.cli.tiered import tiered_app
    return tiered_app


def _exec() -> Loaded:
    from controlplane.cli.exec import exec_app
    return exec_app


def _anomalies() -> Loaded:
    from controlplane.cli.anomalies import anomalies_app
    return anomalies_app


def _clusters() -> Loaded:
    from controlplane.cli.clusters import clusters_app
    from controlplane.cli.read_local import clusters_app as with_read_local  # adds its commands to clusters_app
    assert with_read_local is clusters_app
    return clusters_app


def _topic() -> Loaded:
    from controlplane.cli.topic import topic_app
    return topic_app


def _state() -> Loaded:
    from controlplane.cli.state import state_app
    return state_app


def _lab() -> Loaded:
    from kafkalab.cli import register

    app = typer.Typer(help=LAB_HELP, no_args_is_help=True)
    register(app)
    return app


def _migrate_idc() -> Loaded:
    from controlplane.cli.migrate import migrate_idc_cmd
    return migrate_idc_cmd


def _serve() -> Loaded:
    from controlplane.cli.serve import serve_cmd
    return serve_cmd


def _cluster() -> Loaded:
    from controlplane.cli.serve import cluster_cmd
    return cluster_cmd


def _token_hash() -> Loaded:
    from controlplane.cli.serve import token_hash
    return token_hash


ANALYTICS_HELP = "Audit analytics: ClickHouse (chdb) + PySpark traffic models."
LAB_HELP = ("Real Apache Kafka brokers on this machine (KRaft, SASL_SSL, JBOD on loop devices, JMX exporter + "
            "node_exporter): the reference Guardian is checked against.")

ENTRIES: tuple[Entry, ...] = (
    Entry("plan", "Make and check plans (work offline: no service, cluster or network).", _plan),
    Entry("schema", "Print the JSON Schemas of the contract files.", _schema),
    Entry("sim", "Simulated federations: generate snapshots, run kafkasim.", _sim),
    Entry("snapshot", "Take and inspect snapshot files.", _snapshot),
    Entry("analytics", ANALYTICS_HELP, _analytics),
    Entry("throttle", "Partition-level throttle protection: what is throttled and why.", _throttle),
    Entry("tiered", "Remote-storage (tiered) metadata: partitions, live segments, event groups.", _tiered),
    Entry("exec", "Execute plans on a live cluster (incremental, throttled, resumable).", _exec),
    Entry("anomalies", "Anomalies found by the detectors, their fixes; ignore one.", _anomalies),
    Entry("clusters", "Register clusters with a running service and edit their declared topology.", _clusters),
    Entry("topic", "Topics: create one with a pre-allocated replica assignment.", _topic),
    Entry("state", "The replicated state: its version (rolling upgrades).", _state),
    Entry("lab", LAB_HELP, _lab),
    Entry("migrate-idc", "Move TOPICS to the IDC placement --to, every step to completion, in order (offsets "
                         "kept).", _migrate_idc),
    Entry("serve", "Run a controller node: Raft-replicated state, REST API, leader-only scheduler.", _serve),
    Entry("cluster", "Run a local HA controller group (N `guardian serve` processes) until Ctrl-C; prints its "
                     "endpoints.", _cluster),
    Entry("token-hash", "Print the SHA-256 of a bearer token (what the config's \\[\\[tokens]] sha256 holds).",
          _token_hash),
)
BY_NAME = {e.name: e for e in ENTRIES}


def version_line() -> str:
    """What ``guardian --version`` prints: the distribution and its version."""
    return f"guardian {__version__} ({DISTRIBUTION})"


def _print_version(value: bool) -> None:
    if value:
        print(version_line())
        raise typer.Exit()


def _root_callback(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print Guardian's version and exit.")] = False,
) -> None:
    """Guardian: control plane for a federation of Kafka clusters."""


def to_click(name: str, loaded: Loaded) -> Any:
    """A loaded entry as the (Typer-vendored) Click command the eager root would hold: a Typer app mounted as
    a group (even one with a single command, which Typer alone collapses into that command), a function as a
    command."""
    parent = typer.Typer()
    if isinstance(loaded, typer.Typer):
        parent.add_typer(loaded, name=name)
        group = typer.main.get_command(parent)
        assert isinstance(group, TyperGroup)
        return group.commands[name]
    parent.command(name)(loaded)
    return typer.main.get_command(parent)


def setup_process() -> None:
    """Logging (level from ``$GUARDIAN_LOG_LEVEL``, default WARNING; ``serve`` sets its own) and the token from
    ``$GUARDIAN_TOKEN`` registered as a secret, so no log line carries it."""
    from controlplane.logs import LEVELS, setup_logging
    from domain.redaction import register_secret

    level = os.environ.get("GUARDIAN_LOG_LEVEL", "WARNING").upper()
    setup_logging(level if level in LEVELS else "WARNING")
    register_secret(os.environ.get("GUARDIAN_TOKEN"))


class _Stub(TyperCommand):
    """An entry not loaded yet: its name and one-line help, for the root's help listing."""


class LazyGroup(TyperGroup):
    """The root group: an entry's module is imported the first time its name is resolved to run it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False
        for entry in ENTRIES:
            self.commands[entry.name] = _Stub(entry.name, help=entry.help)

    # Typer vendors Click (typer._click, private): the overrides take its objects untyped
    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = self.commands.get(cmd_name)
        if isinstance(cmd, _Stub) and not self._listing:
            cmd = self.commands[cmd_name] = to_click(cmd_name, BY_NAME[cmd_name].load())
        return cmd

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def invoke(self, ctx: Any) -> Any:
        setup_process()
        return super().invoke(ctx)


def lazy_app() -> typer.Typer:
    """The root as the console script runs it: entries loaded on demand."""
    root = typer.Typer(help=HELP, no_args_is_help=True, pretty_exceptions_enable=False, cls=LazyGroup)
    root.callback()(_root_callback)
    return root


def eager_app() -> typer.Typer:
    """The root with every entry loaded (what tests drive with ``CliRunner``)."""
    root = typer.Typer(help=HELP, no_args_is_help=True, pretty_exceptions_enable=False)
    root.callback()(_root_callback)
    for entry in ENTRIES:
        loaded = entry.load()
        if isinstance(loaded, typer.Typer):
            root.add_typer(loaded, name=entry.name)
        else:
            root.command(entry.name)(loaded)
    return root


def main() -> None:
    """Entry point of the ``guardian`` console script."""
    lazy_app()(prog_name="guardian")
