"""``guardian sim ...`` commands: ``up`` runs a federation, ``truth`` prints its ground truth,
``fault ...`` injects faults.

The lead mounts :func:`register` under the ``sim`` group of ``guardian``; standalone use:
``python -m kafkasim up [--realistic]`` / ``python -m kafkasim fault kill-broker --cluster east --broker 2``.
Every ``up`` serves two exporters per broker (a JMX exporter and a node_exporter, stock names only;
``--sim-series`` adds the ``kafkasim_*`` series for tests of the simulator, ``--legacy-metrics``
serves the old single endpoint instead) and writes an endpoints document with the rack→IDC rule and
the hardware profile. ``up --realistic`` also starts SASL_SSL (SCRAM-SHA-512) listeners, serves the
exporters over https with basic auth, and writes secrets next to the endpoints file (see
:mod:`kafkasim.scenarios.realistic`). ``up --exit-with-parent`` (or ``KAFKASIM_EXIT_WITH_PARENT=1``) stops the
federation once the process that started it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import os
import signal
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import typer

from domain.errors import ContractError
from domain.snapshot_file import parse_snapshot
from kafkasim.scenarios.realistic import operator_endpoints, prepare
from kafkasim.tiering.tiered import TieredManager, TieredSettings
from parentwatch import wait_parent_gone

CONTROL_ENV = "GUARDIAN_SIM_CONTROL_URL"


def _run_up(scenario: Path | None, endpoints_file: Path | None, speed: float | None, control_port: int,
            audit_jsonl: Path | None, duration: float, snapshots: list[Path] | None = None,
            realistic: bool = False, sim_series: bool = False, legacy_metrics: bool = False,
            lines: list[str] | None = None, tiered: TieredSettings | None = None,
            parent_pid: int | None = None) -> None:
    from kafkasim.broker.server import SimServer
    from kafkasim.observe.exporters import MetricsConfig
    from kafkasim.physics.network import parse_cli_line
    from kafkasim.scenarios.scenario import DEFAULT_SCENARIO, ScenarioError, build_federation, load_scenario

    try:
        if scenario:
            spec = load_scenario(scenario)
        elif snapshots:
            spec = {"clusters": []}
        else:
            spec = copy.deepcopy(DEFAULT_SCENARIO)
        spec.setdefault("clusters", [])
        spec["clusters"] = list(spec["clusters"] or []) + [{"snapshot": str(p)} for p in snapshots or []]
        if lines:  # --line overrides or adds to the scenario's leased lines
            extra = [s for text in lines for s in parse_cli_line(text)]
            net = dict(spec.get("network") or {})
            net["lines"] = list(net.get("lines") or []) + [
                {"from": s.src, "to": s.dst, "capacity_bytes_per_s": s.capacity_bps} for s in extra]
            spec["network"] = net
        fed = build_federation(spec)
    except (ScenarioError, OSError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from e
    if speed is not None and not 0 < speed <= 1e6:
        typer.echo("error: --speed must be in (0, 1e6]", err=True)
        raise typer.Exit(2)

    if realistic and legacy_metrics:
        typer.echo("error: --legacy-metrics and --realistic exclude each other", err=True)
        raise typer.Exit(2)
    setup = None
    metrics = MetricsConfig(realistic=not legacy_metrics, sim_series=sim_series)
    if realistic:
        where = endpoints_file.resolve().parent if endpoints_file else Path(tempfile.mkdtemp(prefix="kafkasim-"))
        setup = prepare(where, endpoints_file.stem if endpoints_file else "kafkasim", sim_series=sim_series)

    async def main() -> None:
        server = SimServer(fed, control_port=control_port, speed=speed,
                           audit_jsonl=str(audit_jsonl) if audit_jsonl else None,
                           security=setup.security if setup else None, metrics=setup.metrics if setup else metrics,
                           tiered=TieredManager(fed, tiered) if tiered is not None else None)
        endpoints = await server.start()
        if setup is not None:
            endpoints = operator_endpoints(endpoints, fed, setup)
        line = json.dumps(endpoints, sort_keys=True)
        if endpoints_file is not None:
            tmp = endpoints_file.with_suffix(endpoints_file.suffix + ".tmp")
            tmp.write_text(json.dumps(endpoints, indent=2, sort_keys=True) + "\n")
            tmp.replace(endpoints_file)
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        watch = asyncio.create_task(_watch_parent(parent_pid, stop)) if parent_pid is not None else None
        try:
            if duration > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), duration)
            else:
                await stop.wait()
        finally:
            if watch is not None:
                watch.cancel()
            await server.stop()

    asyncio.run(main())


async def _watch_parent(parent_pid: int, stop: asyncio.Event) -> None:
    """Set ``stop`` once the process that started us is gone (:mod:`parentwatch`): a test runner killed
    before its teardown (SIGTERM from a timeout, SIGKILL) leaves no simulator behind, although ``up`` runs
    in its own session so that its starter can kill its whole process group."""
    await wait_parent_gone(parent_pid)
    stop.set()


def _control_url(control_url: str | None, endpoints_file: Path | None) -> str:
    if control_url:
        return control_url.rstrip("/")
    if endpoints_file is not None:
        try:
            return str(json.loads(endpoints_file.read_text())["control_url"]).rstrip("/")
        except (OSError, ValueError, KeyError) as e:
            typer.echo(f"error: cannot read control_url from {endpoints_file}: {e}", err=True)
            raise typer.Exit(2) from e
    env = os.environ.get(CONTROL_ENV)
    if env:
        return env.rstrip("/")
    typer.echo(f"error: give --control-url, --endpoints-file or set {CONTROL_ENV}", err=True)
    raise typer.Exit(2)


def _post(url: str, path: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            typer.echo(resp.read().decode())
    except urllib.error.HTTPError as e:
        typer.echo(f"error: {e.code}: {e.read().decode()}", err=True)
        raise typer.Exit(1) from e
    except (urllib.error.URLError, OSError) as e:
        typer.echo(f"error: cannot reach {url}: {e}", err=True)
        raise typer.Exit(1) from e


def _get(url: str, path: str) -> str:
    try:
        with urllib.request.urlopen(url + path, timeout=15) as resp:
            return str(resp.read().decode())
    except urllib.error.HTTPError as e:
        typer.echo(f"error: {e.code}: {e.read().decode()}", err=True)
        raise typer.Exit(1) from e
    except (urllib.error.URLError, OSError) as e:
        typer.echo(f"error: cannot reach {url}: {e}", err=True)
        raise typer.Exit(1) from e


ControlUrl = typer.Option(None, "--control-url", help=f"kafkasim control URL (or ${CONTROL_ENV})")
EndpointsFile = typer.Option(None, "--endpoints-file", help="endpoints JSON written by `sim up`")


def register(app: typer.Typer) -> None:
    """Add ``up`` and the ``fault`` group to ``app``."""

    @app.command("up")
    def up(
        scenario: Path | None = typer.Option(None, "--scenario", help="scenario YAML/JSON (default federation)"),
        endpoints_file: Path | None = typer.Option(None, "--endpoints-file", help="also write endpoints JSON here"),
        speed: float | None = typer.Option(None, "--speed", help="simulated seconds per real second"),
        control_port: int = typer.Option(0, "--control-port", help="control API port (0 = any free)"),
        audit_jsonl: Path | None = typer.Option(None, "--audit-jsonl", help="also append audit records here"),
        duration: float = typer.Option(0.0, "--duration", help="stop after this many real seconds (0 = never)"),
        snapshot: list[Path] | None = typer.Option(None, "--snapshot",
                                                   help="seed a cluster from a guardian.snapshot/v1 file (repeat)"),
        realistic: bool = typer.Option(False, "--realistic",
                                       help="SASL_SSL/SCRAM-SHA-512 listeners, JMX + node exporters per broker "
                                            "over https with basic auth, an operator's endpoints file"),
        sim_series: bool = typer.Option(False, "--sim-series",
                                        help="also serve the kafkasim_* series (tests of the simulator itself)"),
        legacy_metrics: bool = typer.Option(False, "--legacy-metrics",
                                            help="one endpoint per broker with kafkasim's own series (old layout)"),
        line: list[str] | None = typer.Option(None, "--line",
                                              help="leased line IDC:IDC=MB_PER_S (both directions) or IDC>IDC=MB_PER_S "
                                                   "(one direction); repeat; adds to the scenario's network"),
        tiered_address: list[str] | None = typer.Option(
            None, "--tiered-address", help="Guardian tiered-metadata gRPC host:port (repeat for every node): topics "
                                           "with remote.storage.enable=true tier their segments through it"),
        tiered_token_file: Path | None = typer.Option(None, "--tiered-token-file",
                                                      help="file holding the API token the tiered service accepts"),
        tiered_ca_file: Path | None = typer.Option(None, "--tiered-ca-file",
                                                   help="CA of the service's TLS certificate"),
        remote_dir: Path | None = typer.Option(None, "--remote-dir",
                                               help="remote store directory (stand-in for HDFS; default: a temp dir)"),
        follower_tail_s: float = typer.Option(3600.0, "--follower-tail-s", min=0.0,
                                              help="a new follower of a tiered partition copies this much of its tail"),
        exit_with_parent: bool = typer.Option(False, "--exit-with-parent", envvar="KAFKASIM_EXIT_WITH_PARENT",
                                              help="stop when the starting process exits (tests, supervisors)"),
    ) -> None:
        """Start a simulated federation; first stdout line is the endpoints JSON."""
        parent_pid = os.getppid() if exit_with_parent else None
        tiered = None
        if tiered_address:
            if tiered_token_file is None:
                typer.echo("error: --tiered-address needs --tiered-token-file", err=True)
                raise typer.Exit(2)
            try:
                token = tiered_token_file.read_text().strip()
            except OSError as e:
                typer.echo(f"error: cannot read --tiered-token-file {tiered_token_file}: {e}", err=True)
                raise typer.Exit(2) from e
            tiered = TieredSettings(tuple(tiered_address), token,
                                    remote_dir or Path(tempfile.mkdtemp(prefix="kafkasim-remote-")),
                                    follower_tail_s, tiered_ca_file)
        _run_up(scenario, endpoints_file, speed, control_port, audit_jsonl, duration, snapshot, realistic, sim_series,
                legacy_metrics, line, tiered, parent_pid)

    @app.command("truth")
    def truth(cluster: str = typer.Option(..., "--cluster"),
              control_url: str | None = ControlUrl, endpoints_file: Path | None = EndpointsFile) -> None:
        """Print the simulator's ground truth of CLUSTER as a guardian.snapshot/v1 document."""
        url = _control_url(control_url, endpoints_file)
        text = _get(url, "/snapshot?" + urllib.parse.urlencode({"cluster": cluster}))
        try:
            parse_snapshot(text)
        except ContractError as e:
            typer.echo(f"error: the simulator's snapshot does not validate: {e}", err=True)
            raise typer.Exit(1) from e
        typer.echo(json.dumps(json.loads(text), indent=2, sort_keys=True))

    fault = typer.Typer(help="Inject faults into a running kafkasim.", no_args_is_help=True)
    app.add_typer(fault, name="fault")

    @fault.command("kill-broker")
    def kill_broker(cluster: str = typer.Option(..., "--cluster"), broker: int = typer.Option(..., "--broker"),
                    control_url: str | None = ControlUrl, endpoints_file: Path | None = EndpointsFile) -> None:
        """Stop a broker (its port closes; leadership moves)."""
        _post(_control_url(control_url, endpoints_file), "/fault/kill-broker", {"cluster": cluster, "broker": broker})

    @fault.command("revive-broker")
    def revive_broker(cluster: str = typer.Option(..., "--cluster"), broker: int = typer.Option(..., "--broker"),
                      control_url: str | None = ControlUrl, endpoints_file: Path | None = EndpointsFile) -> None:
        """Restart a killed broker on its old port."""
        _post(_control_url(control_url, endpoints_file), "/fault/revive-broker",
              {"cluster": cluster, "broker": broker})

    @fault.command("slow-disk")
    def slow_disk(cluster: str = typer.Option(..., "--cluster"), broker: int = typer.Option(..., "--broker"),
                  log_dir: str = typer.Option(..., "--log-dir"), factor: float = typer.Option(10.0, "--factor"),
                  control_url: str | None = ControlUrl, endpoints_file: Path | None = EndpointsFile) -> None:
        """Make a log dir's disk FACTOR times slower (1 heals it)."""
        _post(_control_url(control_url, endpoints_file), "/fault/slow-disk",
              {"cluster": cluster, "broker": broker, "log_dir": log_dir, "factor": factor})

    @fault.command("offline-log-dir")
    def offline_log_dir(cluster: str = typer.Option(..., "--cluster"), broker: int = typer.Option(..., "--broker"),
                        log_dir: str = typer.Option(..., "--log-dir"),
                        control_url: str | None = ControlUrl, endpoints_file: Path | None = EndpointsFile) -> None:
        """Fail a log dir's disk (KIP-112): its replicas go offline, the broker runs on."""
        _post(_control_url(control_url, endpoints_file), "/fault/offline-log-dir",
              {"cluster": cluster, "broker": broker, "log_dir": log_dir})

    @fault.command("lagging-consumer")
    def lagging_consumer(cluster: str = typer.Option(..., "--cluster"), topic: str = typer.Option(..., "--topic"),
                         partition: int | None = typer.Option(None, "--partition"),
                         lag_bytes: float = typer.Option(50e9, "--lag-bytes"),
                         rate: float = typer.Option(50e6, "--rate", help="catch-up read rate, bytes/s"),
                         control_url: str | None = ControlUrl, endpoints_file: Path | None = EndpointsFile) -> None:
        """Put a consumer LAG_BYTES behind on a topic (or one partition)."""
        _post(_control_url(control_url, endpoints_file), "/fault/lagging-consumer",
              {"cluster": cluster, "topic": topic, "partition": partition, "lag_bytes": lag_bytes,
               "rate_bytes_per_s": rate})

    @fault.command("traffic-spike")
    def traffic_spike(cluster: str = typer.Option(..., "--cluster"), topic: str = typer.Option(..., "--topic"),
                      partition: int | None = typer.Option(None, "--partition"),
                      factor: float = typer.Option(5.0, "--factor", help="rate multiplier (1 ends the spike)"),
                      control_url: str | None = ControlUrl, endpoints_file: Path | None = EndpointsFile) -> None:
        """Multiply a topic's (or partition's) produce rate by FACTOR."""
        _post(_control_url(control_url, endpoints_file), "/fault/traffic-spike",
              {"cluster": cluster, "topic": topic, "partition": partition, "factor": factor})


def main() -> None:
    """Entry point of ``python -m kafkasim``."""
    app = typer.Typer(help="kafkasim: a Kafka-wire-compatible simulated federation.", no_args_is_help=True)
    register(app)
    app()
