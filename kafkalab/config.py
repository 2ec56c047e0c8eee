"""Goal: the files a real Kafka node and its exporters are started with, rendered from the lab's layout.

Method: pure functions from a :class:`NodeLayout` (ids, ports, log dirs, rack, paths of the TLS files) to
text: ``server.properties`` (KRaft, combined broker+controller for the first three nodes, broker only
after), a log4j2 properties file (the broker's ``server.log`` in its own directory), the JMX exporter
agent's YAML (``deploy/jmx_exporter/kafka-broker.yml``'s rules verbatim, plus an ``httpServer`` section
for TLS and basic auth) and node_exporter's web config.

Listeners, as a production cluster has them:

* ``CLIENT`` — SASL_SSL with SCRAM-SHA-512 (what Guardian, the tests and any client use);
* ``INTERNAL`` — inter-broker replication over mutual TLS (the node certificate, both usages);
* ``CONTROLLER`` — the KRaft quorum over mutual TLS.

Topology: ``broker.rack`` is the node's rack (``<idc>-r<k>``), and
``replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`` (KIP-392). No
authorizer is configured: every SCRAM user is a superuser of the lab (a production cluster would set
``authorizer.class.name`` and ACLs; Guardian needs Alter/Describe on the cluster and topics either way).

Guarantee: no password appears in any rendered file but the JMX exporter's YAML holds a PBKDF2 hash and
node_exporter's a bcrypt hash; server.properties holds no secret at all (SCRAM credentials live in the
metadata log, set at format time; the PEM keystore is unencrypted and mode 0600).
Cost: string formatting.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from kafkalab.credentials import PBKDF2_ITERATIONS, PBKDF2_KEY_BYTES
from kafkalab.errors import LabError

RACK_AWARE_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
MAX_CONTROLLERS = 3


@dataclass(frozen=True)
class NodePorts:
    client: int
    internal: int
    controller: int | None
    jmx_exporter: int


@dataclass(frozen=True)
class NodeLayout:
    """Everything one node's configuration depends on."""

    node_id: int
    ports: NodePorts
    log_dirs: tuple[Path, ...]
    metadata_dir: Path
    rack: str
    voters: str  # ``1@127.0.0.1:p1,2@...`` (the static KRaft quorum)
    brokers: int  # cluster size: replication factors of internal topics
    keystore: Path
    ca_file: Path
    host: str = "127.0.0.1"
    tiered: dict[str, str] | None = None

    @property
    def is_controller(self) -> bool:
        return self.ports.controller is not None


def voters(controller_ports: dict[int, int], host: str = "127.0.0.1") -> str:
    """``controller.quorum.voters`` of the nodes with a controller port."""
    return ",".join(f"{nid}@{host}:{port}" for nid, port in sorted(controller_ports.items()))


def server_properties(n: NodeLayout) -> str:
    """``server.properties`` of one node."""
    rf = min(3, n.brokers)
    listeners = [f"CLIENT://{n.host}:{n.ports.client}", f"INTERNAL://{n.host}:{n.ports.internal}"]
    if n.ports.controller is not None:
        listeners.append(f"CONTROLLER://{n.host}:{n.ports.controller}")
    props: dict[str, str | int] = {
        "process.roles": "broker,controller" if n.is_controller else "broker",
        "node.id": n.node_id,
        "controller.quorum.voters": n.voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "advertised.listeners": f"CLIENT://{n.host}:{n.ports.client},INTERNAL://{n.host}:{n.ports.internal}",
        "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL",
        "inter.broker.listener.name": "INTERNAL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.client.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.client.scram-sha-512.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(n.keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(n.ca_file),
        "listener.name.internal.ssl.client.auth": "required",
        "listener.name.controller.ssl.client.auth": "required",
        "ssl.endpoint.identification.algorithm": "https",
        "log.dirs": ",".join(str(d) for d in n.log_dirs),
        "metadata.log.dir": str(n.metadata_dir),
        "broker.rack": n.rack,
        "replica.selector.class": RACK_AWARE_SELECTOR,
        "auto.create.topics.enable": "false",
        "default.replication.factor": rf,
        "min.insync.replicas": 1,
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": 1,
        "group.initial.rebalance.delay.ms": 0,
        # a lab on two cores: fewer threads than a production broker's defaults
        "num.network.threads": 2,
        "num.io.threads": 4,
        "num.recovery.threads.per.data.dir": 1,
        "background.threads": 4,
        "log.segment.bytes": 64 * 1024 * 1024,
        "log.retention.check.interval.ms": 30_000,
        "replica.lag.time.max.ms": 10_000,
        # a dead broker is fenced after this (Guardian's healing grace is counted from its absence)
        "broker.session.timeout.ms": 9_000,
        "broker.heartbeat.interval.ms": 2_000,
        "controller.quorum.election.timeout.ms": 1_000,
        "controller.quorum.fetch.timeout.ms": 2_000,
        "leader.imbalance.check.interval.seconds": 30,
        "auto.leader.rebalance.enable": "false",
    }
    for key, value in (n.tiered or {}).items():
        props[key] = value
    return "".join(f"{k}={v}\n" for k, v in props.items())


def log4j2_properties(log_file: Path) -> str:
    """log4j2 configuration: INFO to ``log_file`` (rolled at 50 MB, 3 kept), state-change chatter at WARN."""
    return f"""status = warn
name = guardian-lab
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.filePattern = {log_file}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def _yaml() -> ModuleType:
    """PyYAML: the exporters' configuration files are YAML (the ``sim`` extra, which make installs)."""
    try:
        import yaml
    except ImportError:
        raise LabError("writing the exporters' YAML configs needs PyYAML: pip install 'kafka-guardian[sim]'") from None
    return yaml


def jmx_exporter_yaml(rules_yaml: str, p12: Path, p12_password: str, user: str, password_hash: str,
                      salt: str) -> str:
    """The agent's configuration: the shipped rules file plus TLS (PKCS#12) and basic auth (PBKDF2 hash)."""
    yaml = _yaml()
    doc = yaml.safe_load(rules_yaml)
    doc["httpServer"] = {
        "authentication": {"basic": {"username": user, "passwordHash": password_hash,
                                     "algorithm": "PBKDF2WithHmacSHA256", "salt": salt,
                                     "iterations": PBKDF2_ITERATIONS, "keyLength": PBKDF2_KEY_BYTES}},
        "ssl": {"keyStore": {"filename": str(p12), "type": "PKCS12", "password": p12_password},
                "certificate": {"alias": "exporter"}},
    }
    return yaml.safe_dump(doc, sort_keys=False)


def node_exporter_web_config(cert: Path, key: Path, user: str, bcrypt_hash: str) -> str:
    """node_exporter's ``--web.config.file``: TLS and one basic-auth user."""
    return _yaml().safe_dump({"tls_server_config": {"cert_file": str(cert), "key_file": str(key)},
                           "basic_auth_users": {user: bcrypt_hash}}, sort_keys=False)
