"""``guardian lab up|down|status|jars|kill-broker|start-broker|fail-log-dir|confine|unconfine``: real Kafka
brokers on this machine.

Goal: the operator's (and the tests') handle on :mod:`kafkalab.lab`, with a clear message and exit code 2
for anything refused, never a traceback.
Method: thin Typer commands over :func:`kafkalab.lab.up` and friends; ``up`` prints progress to stderr and
the endpoints document's path (and the document, with ``--json``) on stdout.
Guarantee: exit 0 on success, 1 when ``down`` could not undo something (each named), 2 on refused input
or a failed start (the lab is stopped and its devices released first).
Cost: that of the lab's operations.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import typer

from kafkalab.disks import DiskMode
from kafkalab.errors import LabError
from kafkalab.jars import ensure_jars
from kafkalab.lab import (
    DEFAULT_DIR,
    LabSpec,
    confine,
    down,
    fail_log_dir,
    kill_node,
    start_node,
    status,
    unconfine,
    up,
)
from kafkalab.plugin import ensure_plugin

DirOption = typer.Option(Path(os.environ.get("GUARDIAN_LAB_DIR", str(DEFAULT_DIR))), "--dir",
                         help="the lab's directory (state, TLS files, passwords, logs; env GUARDIAN_LAB_DIR)")


def _fail(exc: LabError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


def _undone(problems: list[str]) -> None:
    """Name each thing that could not be undone; exit 1 when there is any."""
    for p in problems:
        typer.echo(f"error: {p}", err=True)
    if problems:
        raise typer.Exit(1)


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)
    except ValueError:
        raise typer.BadParameter(f"{text!r}: expected a size such as 2G or 512M") from None


def register(app: typer.Typer) -> None:
    """Add the lab's commands to ``app``."""

    @app.command("up")
    def lab_up(
        brokers: int = typer.Option(4, "--brokers", help="Kafka nodes (the first three are also KRaft controllers)"),
        log_dirs: int = typer.Option(3, "--log-dirs", help="JBOD log dirs per broker, each on its own loop device"),
        endpoints_file: Path | None = typer.Option(None, "--endpoints-file",
                                                   help="write the endpoints document here (as `sim up --realistic`)"),
        idcs: int = typer.Option(1, "--idcs", help="IDCs: broker.rack is <idc>-r<k>, brokers spread round-robin"),
        tiered: bool = typer.Option(False, "--tiered", help="KIP-405 tiered storage with Guardian's RLMM plugin"),
        directory: Path = DirOption,
        cluster: str = typer.Option("lab", "--cluster", help="the cluster's name in the endpoints document"),
        disks: str = typer.Option("auto", "--disks",
                                  help="auto (loop devices when root, else plain directories), loop or dir"),
        log_dir_size: str = typer.Option("2G", "--log-dir-size", help="size of each log dir's file system"),
        heap: str = typer.Option("512m", "--heap", help="each node's JVM heap"),
        disk_mbps: int = typer.Option(200, "--disk-mbps",
                                      help="the disks' declared ceiling in the endpoints' hardware profile, MB/s"),
        as_json: bool = typer.Option(False, "--json", help="print the endpoints document on stdout"),
    ) -> None:
        """Start real Apache Kafka brokers (KRaft, SASL_SSL, JBOD on loop devices, JMX exporter, node_exporter)."""
        if disks not in ("auto", "loop", "dir"):
            raise typer.BadParameter("expected auto, loop or dir", param_hint="--disks")
        mode: DiskMode = disks  # type: ignore[assignment]
        spec = LabSpec(brokers=brokers, log_dirs=log_dirs, idcs=idcs, cluster=cluster, directory=directory,
                       disks=mode, log_dir_bytes=_size(log_dir_size), heap=heap,
                       disk_max_bytes_per_s=disk_mbps * 1_000_000, tiered=tiered)
        typer.echo(f"starting {brokers} Kafka brokers in {directory} ...", err=True)
        try:
            doc = up(spec, endpoints_file)
        except LabError as exc:
            raise _fail(exc) from None
        lab = doc["endpoints"]["lab"]
        typer.echo(f"Kafka {doc['kafka_version']} up: {doc['bootstrap_servers']} (SASL_SSL, SCRAM-SHA-512); "
                   f"{lab['disks_note']}", err=True)
        if as_json:
            typer.echo(json.dumps(doc["endpoints"], indent=2, sort_keys=True))
        elif endpoints_file is not None:
            typer.echo(str(endpoints_file))

    @app.command("jars")
    def lab_jars() -> None:
        """Fetch the lab's jars from Maven Central once (kafkalab/pom.xml), build Guardian's RLMM plug-in
        (tiered/rlmm-plugin) and print where they are."""
        try:
            jars = ensure_jars()
            plugin = ensure_plugin()
        except LabError as exc:
            raise _fail(exc) from None
        typer.echo(f"Kafka {jars.kafka_version} and {jars.agent.name} in {jars.directory}")
        typer.echo(f"Guardian's RLMM plug-in and Kafka's LocalTieredStorage in {plugin.directory / 'build'}")

    @app.command("down")
    def lab_down(directory: Path = DirOption,
                 keep: bool = typer.Option(False, "--keep", help="keep the directory (logs) after stopping")) -> None:
        """Stop the lab's brokers and exporters, release its loop devices, delete its directory."""
        try:
            problems = down(directory, keep_dir=keep)
        except LabError as exc:
            raise _fail(exc) from None
        _undone(problems)
        typer.echo("lab stopped", err=True)

    @app.command("status")
    def lab_status(directory: Path = DirOption) -> None:
        """Print the lab's nodes (pid, running, rack, log dirs) as JSON."""
        try:
            typer.echo(json.dumps(status(directory), indent=2))
        except LabError as exc:
            raise _fail(exc) from None

    @app.command("kill-broker")
    def lab_kill(broker: int = typer.Option(..., "--broker"), directory: Path = DirOption,
                 sig: str = typer.Option("KILL", "--signal", help="KILL (kill -9), TERM, STOP or CONT")) -> None:
        """Send a signal to one broker's JVM (kill -9 by default)."""
        try:
            number = signal.Signals["SIG" + sig.upper().removeprefix("SIG")]
        except KeyError:
            raise typer.BadParameter(f"{sig!r}: expected KILL, TERM, STOP or CONT", param_hint="--signal") from None
        try:
            pid = kill_node(directory, broker, number)
        except LabError as exc:
            raise _fail(exc) from None
        typer.echo(f"sent {number.name} to broker {broker} (pid {pid})", err=True)

    @app.command("start-broker")
    def lab_start(broker: int = typer.Option(..., "--broker"), directory: Path = DirOption) -> None:
        """Start a killed broker again with its original configuration."""
        try:
            pid = start_node(directory, broker)
        except LabError as exc:
            raise _fail(exc) from None
        typer.echo(f"broker {broker} started (pid {pid})", err=True)

    @app.command("fail-log-dir")
    def lab_fail_log_dir(broker: int = typer.Option(..., "--broker"),
                         log_dir: str | None = typer.Option(None, "--log-dir",
                                                            help="the dir to fail (default: the broker's first)"),
                         directory: Path = DirOption) -> None:
        """Make one log dir's disk fail (every I/O returns EIO, as a dead JBOD disk): Kafka takes it offline
        (KIP-112) at its next I/O there. Undone only by `down` (the file system is unmounted)."""
        try:
            path = fail_log_dir(directory, broker, log_dir)
        except LabError as exc:
            raise _fail(exc) from None
        typer.echo(f"log dir {path} of broker {broker} failed (every I/O on it returns EIO)", err=True)

    @app.command("confine")
    def lab_confine(
        broker: int = typer.Option(..., "--broker"),
        memory: str | None = typer.Option(None, "--memory",
                                          help="the broker JVM's memory cgroup limit (heap, non-heap and page "
                                               "cache), e.g. 512M: a small page cache"),
        read_rate: str | None = typer.Option(None, "--read-rate",
                                             help="cap the broker's disk reads at this many bytes/s, e.g. 4M: its "
                                                  "log dirs' devices saturate there (declared as their ceiling)"),
        evict: bool = typer.Option(False, "--evict", help="drop the cached pages of the broker's log dirs' files"),
        endpoints_file: Path | None = typer.Option(None, "--endpoints-file",
                                                   help="rewrite this endpoints document with the declared ceiling"),
        directory: Path = DirOption,
    ) -> None:
        """Give a broker a small page cache and/or slow disks (cgroup v1 memory and blkio; undone by unconfine/down)."""
        if memory is None and read_rate is None and not evict:
            raise typer.BadParameter("give --memory, --read-rate and/or --evict")
        try:
            doc = confine(directory, broker, _size(memory) if memory else None, _size(read_rate) if read_rate else None,
                          evict, endpoints_file)
        except LabError as exc:
            raise _fail(exc) from None
        typer.echo(json.dumps((doc.get("cgroups") or {}).get(str(broker), []), indent=2))

    @app.command("unconfine")
    def lab_unconfine(broker: int = typer.Option(..., "--broker"), directory: Path = DirOption,
                      endpoints_file: Path | None = typer.Option(None, "--endpoints-file",
                                                                 help="rewrite this endpoints document")) -> None:
        """Undo ``confine`` for one broker."""
        try:
            problems = unconfine(directory, broker, endpoints_file)
        except LabError as exc:
            raise _fail(exc) from None
        _undone(problems)
