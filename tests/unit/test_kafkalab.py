"""``guardian lab``'s pure parts and refusals: the rendered node configuration, the exporters' credentials, the
plain-directory fallback, and the CLI's messages for bad input (no broker is started here; the lab itself is
exercised by tests/contract and tests/e2e/test_lab_*.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kafkalab import config as cfg
from kafkalab import credentials as creds
from kafkalab import lab as kl
from kafkalab.cli import register
from kafkalab.disks import provision
from kafkalab.errors import LabError


def layout(node_id: int, controller: bool) -> cfg.NodeLayout:
    ports = cfg.NodePorts(9001, 9002, 9003 if controller else None, 9004)
    return cfg.NodeLayout(node_id=node_id, ports=ports,
                          log_dirs=(Path("/d/b1/data1"), Path("/d/b1/data2")), metadata_dir=Path("/d/n1/meta"),
                          rack="idc-b-r2", voters=cfg.voters({1: 9003, 2: 9013}), brokers=4,
                          keystore=Path("/t/ks.pem"), ca_file=Path("/t/ca.pem"))


def props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_a_combined_node_is_secured_rack_aware_and_jbod() -> None:
    p = props(cfg.server_properties(layout(1, controller=True)))
    assert p["process.roles"] == "broker,controller"
    assert p["controller.quorum.voters"] == "1@127.0.0.1:9003,2@127.0.0.1:9013"
    assert p["listener.security.protocol.map"] == "CLIENT:SASL_SSL,INTERNAL:SSL,CONTROLLER:SSL"
    assert p["listener.name.client.sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert p["listener.name.internal.ssl.client.auth"] == p["listener.name.controller.ssl.client.auth"] == "required"
    assert p["advertised.listeners"] == "CLIENT://127.0.0.1:9001,INTERNAL://127.0.0.1:9002"
    assert p["log.dirs"] == "/d/b1/data1,/d/b1/data2"
    assert p["broker.rack"] == "idc-b-r2"
    assert p["replica.selector.class"] == cfg.RACK_AWARE_SELECTOR
    assert p["offsets.topic.replication.factor"] == "3"
    assert not any("password" in k for k in p)  # SCRAM credentials live in the metadata log


def test_a_broker_only_node_has_no_controller_listener() -> None:
    p = props(cfg.server_properties(layout(4, controller=False)))
    assert p["process.roles"] == "broker"
    assert "CONTROLLER://" not in p["listeners"]


def test_exporter_credentials_are_hashes_only(tmp_path: Path) -> None:
    rules = "lowercaseOutputName: true\nrules:\n- pattern: x\n  name: y\n"
    text = cfg.jmx_exporter_yaml(rules, tmp_path / "e.p12", "p12pw", "prometheus",
                                 creds.pbkdf2_hash("s3cret", "salt"), "salt")
    doc = yaml.safe_load(text)
    assert doc["rules"] == [{"pattern": "x", "name": "y"}] and doc["lowercaseOutputName"] is True
    basic = doc["httpServer"]["authentication"]["basic"]
    expected = hashlib.pbkdf2_hmac("sha256", b"s3cret", b"salt", basic["iterations"], basic["keyLength"]).hex()
    assert basic["passwordHash"] == expected and "s3cret" not in text
    web = yaml.safe_load(cfg.node_exporter_web_config(Path("c"), Path("k"), "prometheus", "$2b$10$abc"))
    assert web["basic_auth_users"] == {"prometheus": "$2b$10$abc"}


def test_secrets_are_files_of_mode_0600(tmp_path: Path) -> None:
    s = creds.generate(tmp_path)
    for path in (s.keystore, s.server_key, s.exporter_p12, s.password_file(creds.KAFKA_USER),
                 s.password_file(creds.METRICS_USER)):
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert "PRIVATE KEY" in s.keystore.read_text() and s.keystore.read_text().count("CERTIFICATE") == 4
    assert len(s.password(creds.KAFKA_USER)) >= 24


def test_plain_directories_when_asked_and_why(tmp_path: Path) -> None:
    dirs, why = provision([tmp_path / "a", tmp_path / "b"], tmp_path / "img", 1 << 20, mode="dir")
    assert [d.path for d in dirs] == [tmp_path / "a", tmp_path / "b"] and all(d.device is None for d in dirs)
    assert why is not None and "plain directories" in why
    assert (tmp_path / "a").is_dir()


@pytest.mark.parametrize(("spec", "field"), [
    (kl.LabSpec(brokers=0), "--brokers"), (kl.LabSpec(log_dirs=9), "--log-dirs"),
    (kl.LabSpec(brokers=2, idcs=3), "--idcs")])
def test_refused_specs_name_the_option(spec: kl.LabSpec, field: str) -> None:
    with pytest.raises(LabError, match=field):
        spec.check()


def test_cli_refusals_are_exit_2_with_a_message(tmp_path: Path) -> None:
    import typer

    app = typer.Typer()
    register(app)
    runner = CliRunner()
    r = runner.invoke(app, ["down", "--dir", str(tmp_path / "none")])
    assert r.exit_code == 2 and "no lab in" in r.output
    r = runner.invoke(app, ["up", "--brokers", "0", "--dir", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--brokers" in r.output
    r = runner.invoke(app, ["up", "--disks", "floppy", "--dir", str(tmp_path / "x")])
    assert r.exit_code == 2 and "--disks" in r.output
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "lab.json").write_text(json.dumps({"format": "other"}))
    r = runner.invoke(app, ["status", "--dir", str(tmp_path / "bad")])
    assert r.exit_code == 2 and "not a guardian.lab/v1 state file" in r.output
    r = runner.invoke(app, ["fail-log-dir", "--broker", "1", "--dir", str(tmp_path / "none")])
    assert r.exit_code == 2 and "no lab in" in r.output
    plain = tmp_path / "plain"
    dirs, _ = provision([plain / "b1d1"], plain / "img", 1 << 20, mode="dir")
    plain.joinpath("lab.json").write_text(json.dumps({
        "format": kl.FORMAT, "dir": str(plain), "log_dirs": [d.to_json() for d in dirs],
        "nodes": [{"id": 1, "log_dirs": [str(dirs[0].path)]}]}))
    r = runner.invoke(app, ["fail-log-dir", "--broker", "1", "--log-dir", "/elsewhere", "--dir", str(plain)])
    assert r.exit_code == 2 and "--log-dir: /elsewhere is not a log dir of node 1" in r.output
    r = runner.invoke(app, ["fail-log-dir", "--broker", "1", "--dir", str(plain)])  # a plain dir cannot fail alone
    assert r.exit_code == 2 and "not on a loop device of its own" in r.output
    r = runner.invoke(app, ["fail-log-dir", "--broker", "7", "--dir", str(plain)])
    assert r.exit_code == 2 and "--broker: no node 7" in r.output


def test_the_endpoints_document_is_what_the_api_registers(tmp_path: Path) -> None:
    """The lab writes an operator's document: one cluster of it is ``POST /api/v1/clusters``'s body as it is."""
    from controlplane.api.clusters import ClusterIn

    s = creds.generate(tmp_path)
    doc = {"dir": str(tmp_path), "cluster": "lab", "kafka_version": "4.2.0", "disks": "loop", "disks_note": None,
           "bootstrap_servers": "127.0.0.1:9001,127.0.0.1:9011", "disk_kind": "ssd", "disk_max_bytes_per_s": 2e8,
           "node_exporter": {"url": "https://127.0.0.1:9100/metrics"},
           "nodes": [{"id": i, "jmx_url": f"https://127.0.0.1:700{i}/metrics", "log_dirs": [f"/l/b{i}/data1"],
                      "ports": {"client": 9001}} for i in (1, 2)]}
    cluster = kl.endpoints_document(doc)["clusters"]["lab"]
    body = ClusterIn.model_validate({"name": "lab", **cluster})
    assert [b.id for b in body.brokers] == [1, 2]
    assert cluster["security"]["password_file"] == str(s.password_file(creds.KAFKA_USER))
    assert s.password(creds.KAFKA_USER) not in json.dumps(cluster)


def test_tiered_broker_properties_name_the_plugin_and_pass_the_token_by_file(tmp_path: Path) -> None:
    from kafkalab import tiered as tiered_service
    from kafkalab.plugin import RLMM_CLASS, RSM_CLASS

    token_file = tmp_path / "operator.token"
    token_file.write_text("s3cret-token\n")
    state = {"grpc": ["127.0.0.1:1", "127.0.0.1:2"], "ca_file": str(tmp_path / "ca.pem"),
             "token_file": str(token_file), "remote_dir": str(tmp_path / "remote")}
    props = tiered_service.broker_properties(state, "lab")
    assert props["remote.log.storage.system.enable"] == "true"
    assert props["remote.log.metadata.manager.class.name"] == RLMM_CLASS
    assert props["remote.log.storage.manager.class.name"] == RSM_CLASS
    assert props["rlmm.config.guardian.tiered.targets"] == "127.0.0.1:1,127.0.0.1:2"
    assert props["rlmm.config.guardian.tiered.token.file"] == str(token_file)
    assert not any("s3cret-token" in v for v in props.values())  # the token itself is never a property


def test_a_cluster_id_never_starts_with_a_dash() -> None:
    """Kafka's storage tool reads ``--cluster-id -x...`` as a missing value (CI: a lab's format failed once)."""
    from kafkalab.lab import _cluster_id

    ids = [_cluster_id() for _ in range(5000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids) and len(set(ids)) == 5000
