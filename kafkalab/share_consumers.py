"""Goal: KIP-932 share consumers on the lab — Kafka's own stock tool, not an imitation — so Guardian's reading of a
share group is checked against what real members do.

Method: kafka-python has no share consumer. Kafka's ``kafka-console-share-consumer.sh`` is a thin wrapper around
``org.apache.kafka.tools.consumer.ConsoleShareConsumer`` (artifact ``kafka-tools``, in the lab's jar cache through
``kafkalab/pom.xml``); :class:`ShareConsumer` runs it as ``java -cp '<jars>/*' ...`` with the lab's client
settings (SASL_SSL, SCRAM-SHA-512 as the ``guardian`` user, the lab's CA as a PEM trust store) written to a
properties file of mode 0600 (the password is never on a command line), one ``client.id`` per member. What it
prints goes to a file (or nowhere); :meth:`ShareConsumer.pause` / :meth:`resume` stop and continue the JVM
(SIGSTOP/SIGCONT: a paused member stops fetching and acknowledging but stays in the group until its session times
out, ``group.share.session.timeout.ms``, 45 s by default).

Guarantee: :meth:`ShareConsumer.stop` (also on leaving the ``with`` block) ends the JVM it started — resumed first
if paused, SIGTERM, then SIGKILL after 10 s — and nothing else.
Cost: one JVM per member (~150 MB resident with ``-Xmx128m``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Any

from kafkalab import credentials as creds
from kafkalab.errors import LabError
from kafkalab.jars import ensure_jars

CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"


def client_properties(doc: dict[str, Any]) -> str:
    """Java client settings for the lab (the ``guardian`` SCRAM user over SASL_SSL, the lab's CA)."""
    s = creds.LabSecrets(Path(doc["dir"]))
    password = s.password(creds.KAFKA_USER).replace("\\", "\\\\").replace('"', '\\"')
    jaas = (f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{creds.KAFKA_USER}" '
            f'password="{password}";')
    return "".join(f"{k}={v}\n" for k, v in {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": creds.MECHANISM,
        "sasl.jaas.config": jaas.replace("\\", "\\\\"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(s.ca_file),
    }.items())


class ShareConsumer:
    """One member of a share group: Kafka's ConsoleShareConsumer on the lab (see the module docstring)."""

    def __init__(self, doc: dict[str, Any], group: str, topic: str, client_id: str, workdir: Path,
                 output: Path | None = None, heap: str = "128m", extra: dict[str, str] | None = None) -> None:
        self.doc = doc
        self.group = group
        self.topic = topic
        self.client_id = client_id
        self.workdir = workdir
        self.output = output
        self.heap = heap
        self.extra = dict(extra or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False

    def command(self, props: Path) -> list[str]:
        """The JVM's command line (no secret on it: the client settings are in ``props``)."""
        java = shutil.which("java")
        if java is None:
            raise LabError("java is not installed")
        jars = ensure_jars()
        cmd = [java, f"-Xmx{self.heap}", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
               "-Dlog4j2.level=WARN", "-cp", str(jars.directory / "*"), CONSOLE_SHARE_CONSUMER,
               "--bootstrap-server", str(self.doc["bootstrap_servers"]), "--topic", self.topic,
               "--group", self.group, "--command-config", str(props),
               "--command-property", f"client.id={self.client_id}",
               "--formatter-property", "print.offset=true"]
        for k, v in sorted(self.extra.items()):
            cmd += ["--command-property", f"{k}={v}"]
        return cmd

    def start(self) -> ShareConsumer:
        """Start the JVM (idempotent while it runs)."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        self.workdir.mkdir(parents=True, exist_ok=True)
        props = self.workdir / f"{self.client_id}.properties"
        fd = os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(client_properties(self.doc))
        out = open(self.output, "ab") if self.output is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.proc = subprocess.Popen(self.command(props), stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # type: ignore[union-attr]
        return self

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pause(self) -> None:
        """SIGSTOP the member: it stops fetching and acknowledging (and heartbeating)."""
        if self.running() and self.proc is not None:
            os.kill(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT a paused member."""
        if self.proc is not None and self.paused:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.paused = False

    def stop(self) -> None:
        """End the JVM this object started (see the module docstring)."""
        p = self.proc
        if p is None:
            return
        self.resume()
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> ShareConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
