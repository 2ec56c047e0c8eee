"""Goal: the jars of Guardian's Kafka plug-in (``tiered/rlmm-plugin``): its ``RemoteLogMetadataManager`` over
the tiered-metadata service and, as the lab's ``RemoteStorageManager``, Kafka's own ``LocalTieredStorage``
(Maven Central serves Kafka's ``kafka-storage`` test jar), built once and put on the brokers' class path by
``guardian lab up --tiered``.

Method: ``mvn -q -B package`` on ``tiered/rlmm-plugin/pom.xml`` (protoc from Maven Central generates the
message classes from ``tiered/proto/tiered_metadata.proto``; the jar and its runtime dependencies land in
``<cache>/build``), when the cache's stamp (a SHA-256 of the POM, the Java sources and the .proto) is missing
or stale.  The cache is ``$GUARDIAN_RLMM_PLUGIN`` when set, else ``.cache/rlmm-plugin`` beside the
repository's packages.  Maven keeps what it fetched in its local repository, so a rebuild after a source
change runs offline.

Guarantee: :func:`ensure_plugin` returns the class path only for a build that finished (the stamp is written
last); a failed build is a :class:`~kafkalab.errors.LabError` naming the command and Maven's last lines.
Cost: ~30-60 s for the first build (downloads ~15 MB), ~10 s for a rebuild, a hash of ~60 kB afterwards.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kafkalab.errors import LabError

REPO = Path(__file__).resolve().parent.parent
MODULE = REPO / "tiered" / "rlmm-plugin"
PROTO = REPO / "tiered" / "proto" / "tiered_metadata.proto"
STAMP = ".sources-sha256"
RLMM_CLASS = "guardian.tiered.rlmm.GuardianRemoteLogMetadataManager"
RSM_CLASS = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
JAR = "guardian-rlmm-1.jar"


@dataclass(frozen=True)
class Plugin:
    """The plug-in's jar and its runtime dependencies."""

    directory: Path

    @property
    def jars(self) -> list[Path]:
        build = self.directory / "build"
        return [build / JAR, *sorted((build / "lib").glob("*.jar"))]

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(p) for p in self.jars)


def cache_dir() -> Path:
    env = os.environ.get("GUARDIAN_RLMM_PLUGIN")
    return Path(env) if env else REPO / ".cache" / "rlmm-plugin"


def sources_hash() -> str:
    """SHA-256 over the POM, the Java sources and the .proto (path and content of each)."""
    h = hashlib.sha256()
    files = [MODULE / "pom.xml", PROTO, *sorted((MODULE / "src").rglob("*.java"))]
    for f in files:
        h.update(str(f.relative_to(REPO)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def ensure_plugin(directory: Path | None = None) -> Plugin:
    """The built plug-in, built with Maven first when the cache is missing or older than the sources."""
    directory = directory or cache_dir()
    if not MODULE.exists():
        raise LabError(f"{MODULE} is missing: the RLMM plug-in's sources ship in the repository")
    stamp = directory / STAMP
    digest = sources_hash()
    if not (stamp.exists() and stamp.read_text().strip() == digest):
        mvn = shutil.which("mvn")
        if mvn is None:
            raise LabError("Maven (mvn) is not installed: Guardian's RLMM plug-in is built with it (apt-get install "
                           "maven)")
        stamp.unlink(missing_ok=True)
        build = directory / "build"
        if build.exists():
            shutil.rmtree(build)
        directory.mkdir(parents=True, exist_ok=True)
        cmd = [mvn, "-q", "-B", "-f", str(MODULE / "pom.xml"), f"-Dplugin.build.dir={build}", "package"]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            raise LabError(f"building Guardian's RLMM plug-in failed ({' '.join(cmd)}):\n{tail}")
        stamp.write_text(digest + "\n")
    plugin = Plugin(directory)
    missing = [p for p in plugin.jars[:1] if not p.exists()]
    if missing or not any(p.name.startswith("kafka-storage-") for p in plugin.jars):
        raise LabError(f"{directory} lacks the plug-in's jar or Kafka's LocalTieredStorage: delete it and run again")
    return plugin
