"""Goal: the jars of ``guardian lab`` — real Apache Kafka and the Prometheus JMX exporter agent — in one
cache, fetched from Maven Central once.

Method: ``kafkalab/pom.xml`` names the artifacts (``kafka_2.13``, its SLF4J binding, and
``jmx_prometheus_javaagent``); :func:`ensure_jars` runs ``mvn -q dependency:copy-dependencies`` into the
cache directory when its stamp (the POM's hash) is missing or stale. The cache is
``$GUARDIAN_LAB_JARS`` when set, else ``.cache/lab-jars`` beside the repository's ``kafkalab`` package
(gitignored), else ``~/.cache/guardian/lab-jars`` for an installed package.

Guarantee: :class:`Jars` holds the broker's class path (every jar but the agent's) and the agent's jar;
a cache a failed download left half-written has no stamp and is fetched again; no Maven, or a refused
download, is a :class:`LabError` naming the command and Maven's last lines.
Cost: one Maven run (~60 MB, seconds on a warm local repository) the first time; a stat afterwards.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kafkalab.errors import LabError

POM = Path(__file__).with_name("pom.xml")
AGENT_PREFIX = "jmx_prometheus_javaagent-"
STAMP = ".pom-sha256"


@dataclass(frozen=True)
class Jars:
    """The broker's class path and the JMX exporter agent's jar."""

    directory: Path
    agent: Path

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(p) for p in sorted(self.directory.glob("*.jar"))
                               if not p.name.startswith(AGENT_PREFIX))

    @property
    def kafka_version(self) -> str:
        for p in self.directory.glob("kafka_2.13-*.jar"):
            return p.name.removeprefix("kafka_2.13-").removesuffix(".jar")
        return "unknown"


def cache_dir() -> Path:
    """Where the jars are kept (see the module docstring)."""
    env = os.environ.get("GUARDIAN_LAB_JARS")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parent.parent
    if (repo / "pyproject.toml").exists():
        return repo / ".cache" / "lab-jars"
    return Path.home() / ".cache" / "guardian" / "lab-jars"


def _pom_hash() -> str:
    return hashlib.sha256(POM.read_bytes()).hexdigest()


def ensure_jars(directory: Path | None = None) -> Jars:
    """The cached jars, fetched with Maven first when the cache is missing or older than the POM."""
    directory = directory or cache_dir()
    stamp = directory / STAMP
    if not (stamp.exists() and stamp.read_text().strip() == _pom_hash()):
        mvn = shutil.which("mvn")
        if mvn is None:
            raise LabError("Maven (mvn) is not installed: the lab's Kafka jars come from Maven Central "
                           "(apt-get install maven, or set GUARDIAN_LAB_JARS to a directory holding them)")
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        cmd = [mvn, "-q", "-B", "-f", str(POM), "dependency:copy-dependencies", f"-DoutputDirectory={directory}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise LabError(f"fetching the lab's jars failed ({' '.join(cmd)}):\n{tail}")
        stamp.write_text(_pom_hash() + "\n")
    agents = sorted(directory.glob(f"{AGENT_PREFIX}*.jar"))
    if not agents or not list(directory.glob("kafka_2.13-*.jar")):
        raise LabError(f"{directory} lacks kafka_2.13 or the JMX exporter agent: delete it and run again")
    return Jars(directory, agents[-1])
