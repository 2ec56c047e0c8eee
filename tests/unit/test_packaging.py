"""The base install works without the extras (``kafka-guardian[analytics]``, ``[plots]``, ``[sim]``).

A fresh virtualenv per test run would be too slow, so a fresh interpreter blocks the extras' packages with
an import hook (any ``import pyspark|pandas|pyarrow|matplotlib|chdb|py4j|yaml`` raises ImportError, as when they
are not installed), then imports every module of every package, runs ``guardian --help`` and builds a
controller with the default configuration (embedded ClickHouse unavailable -> runs without rollups) that
answers ``/healthz`` and ``/metrics``. Only the heavy optional modules may fail to import.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTRAS = {"analytics": {"pyspark", "pandas", "pyarrow", "chdb"}, "plots": {"matplotlib"}, "sim": {"pyyaml"}}
OPTIONAL_MODULES = {
    "analytics_spark.jobs", "analytics_spark.slices", "analytics_spark.transforms", "analytics_spark.plot",
    "analytics_spark.seed", "analytics_spark.sql.baseline", "analytics_spark.sql.engine",
    "controlplane.picture", "controlplane.demo", "controlplane.demo_kafka",
}
"""The heavy optional modules: each needs an extra (the CLI and the service import them only when used)."""

CHECK = r'''
import importlib, importlib.abc, json, pkgutil, sys, tempfile
from pathlib import Path
BLOCKED = {"pyspark", "pandas", "pyarrow", "matplotlib", "chdb", "py4j", "yaml"}

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {name!r} (blocked: an extra)")
        return None

sys.meta_path.insert(0, Block())
failed = {}
for pkg in ["domain", "kafkaio", "controlplane", "raft", "planners", "collectors", "analytics_spark", "kafkasim"]:
    for info in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + "."):
        if info.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError as exc:
            failed[info.name] = str(exc)

from typer.testing import CliRunner
from controlplane.cli.app import app
help_out = CliRunner().invoke(app, ["--help"])
serve_help = CliRunner().invoke(app, ["serve", "--help"])

from fastapi.testclient import TestClient
from controlplane.bootstrap import build_service
from controlplane.config import RaftConf, Settings
from raft.localcluster import free_ports
(port,) = free_ports(1)
svc = build_service(Settings(data_dir=Path(tempfile.mkdtemp()), raft=RaftConf(self_addr=f"127.0.0.1:{port}")))
try:
    svc.store.node.wait_ready(10)
    client = TestClient(svc.app)
    health, metrics = client.get("/healthz").status_code, client.get("/metrics")
finally:
    svc.close()
from kafkasim.scenarios.scenario import ScenarioError, load_scenario
scenario_file = Path(tempfile.mkdtemp()) / "scenario.yaml"
scenario_file.write_text("seed: 1\n")
try:
    load_scenario(scenario_file)
    scenario = "loaded"
except ScenarioError as exc:
    scenario = str(exc)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print(json.dumps({"failed": failed, "help": [help_out.exit_code, help_out.output],
                  "serve_help": [serve_help.exit_code, serve_help.output], "health": health,
                  "metrics": [metrics.status_code, "guardian_raft_is_leader" in metrics.text],
                  "clickhouse": svc.ctx.clickhouse is None, "loaded": loaded, "scenario": scenario}))
'''


def run_blocked() -> dict:
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_base_imports_serves_and_answers_help_without_the_extras() -> None:
    result = run_blocked()
    assert set(result["failed"]) <= OPTIONAL_MODULES, {k: v for k, v in result["failed"].items()
                                                       if k not in OPTIONAL_MODULES}
    assert all("blocked: an extra" in why for why in result["failed"].values()), result["failed"]
    assert result["help"][0] == 0 and "serve" in result["help"][1]
    assert result["serve_help"][0] == 0 and "--config" in result["serve_help"][1]
    assert result["health"] == 200 and result["metrics"] == [200, True]
    assert result["clickhouse"] is True  # embedded chdb is an extra: the node runs without rollups
    assert result["loaded"] == []
    assert "pip install 'kafka-guardian[sim]'" in result["scenario"]  # a YAML scenario names the extra it needs


def test_the_heavy_packages_are_extras_not_base_dependencies() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(specs: list[str]) -> set[str]:
        return {s.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower() for s in specs}

    base = names(project["dependencies"])
    for extra, packages in EXTRAS.items():
        assert packages <= names(project["optional-dependencies"][extra]), extra
        assert not packages & base, packages & base
    makefile = (ROOT / "Makefile").read_text()
    assert "-e '.[dev,analytics,plots,sim]'" in makefile  # make test / make demo install them
