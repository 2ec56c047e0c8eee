"""deploy/'s unit, manifests and container file, validated offline with the real tools.

Goal: what an operator installs from deploy/ is accepted by systemd, Kubernetes and a container builder,
and starts Guardian the way README says. Method: ``systemd-analyze verify`` and ``security --offline``
on the unit (its ExecStart pointed at this venv's ``guardian``); ``kubernetes-validate`` (strict, the
schemas it ships, no network) on every manifest, plus checks of what the schemas cannot see (quorum,
DNS names, readiness, secrets); ``dockerfile-parse`` on the Containerfile; the sample configs load
through :func:`controlplane.config.load_settings`. Cost: a few seconds.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from controlplane.config import load_settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
UNIT = DEPLOY / "systemd" / "guardian.service"


def guardian_script() -> str:
    found = shutil.which("guardian") or str(Path(sys.executable).with_name("guardian"))
    assert Path(found).exists(), found
    return found


def unit_here(tmp_path: Path) -> Path:
    """The unit with ExecStart pointed at this venv's guardian (verify checks the binary exists)."""
    text = UNIT.read_text().replace("/opt/guardian/bin/guardian", guardian_script())
    path = tmp_path / "guardian.service"
    path.write_text(text)
    return path


def systemd_analyze_runs() -> bool:
    if shutil.which("systemd-analyze") is None:
        return False
    probe = subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True, check=False)
    return probe.returncode == 0


needs_systemd = pytest.mark.skipif(not systemd_analyze_runs(), reason="systemd-analyze not installed (make venv)")


@needs_systemd
def test_systemd_analyze_verifies_the_unit_without_a_warning(tmp_path: Path) -> None:
    done = subprocess.run(["systemd-analyze", "verify", str(unit_here(tmp_path))], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "", done.stderr  # unknown keys and bad values are warnings with rc 0


@needs_systemd
def test_systemd_analyze_rates_the_unit_hardened(tmp_path: Path) -> None:
    done = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--no-pager", str(unit_here(tmp_path))],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    score = re.search(r"Overall exposure level for guardian\.service: ([0-9.]+) (\w+)", done.stdout)
    assert score, done.stdout[-500:]
    assert float(score.group(1)) <= 2.0, score.group(0)  # 0 = fully locked down, 10 = unprotected


def test_the_unit_runs_guardian_serve_as_its_own_user_with_credentials_and_a_state_dir() -> None:
    lines = [ln for ln in UNIT.read_text().splitlines() if ln and not ln.startswith("#")]
    keys: dict[str, list[str]] = {}
    for ln in lines:
        if "=" in ln:
            k, v = ln.split("=", 1)
            keys.setdefault(k, []).append(v)
    assert keys["ExecStart"] == ["/opt/guardian/bin/guardian serve --config /etc/guardian/guardian.toml"]
    # installed as CI installs it (tests/e2e/test_wheel_install.py): the wheel, into the venv ExecStart runs
    assert "/opt/guardian/bin/pip install dist/kafka_guardian-*.whl" in UNIT.read_text()
    assert keys["User"] == ["guardian"] and keys["NoNewPrivileges"] == ["yes"] and keys["ProtectSystem"] == ["strict"]
    assert keys["StateDirectory"] == ["guardian"]
    creds = {v.split(":", 1)[0] for v in keys["LoadCredential"]}
    assert creds == {"raft.key", "tokens.toml"}
    # the sample config reads exactly those credentials and keeps its state in the StateDirectory
    sample = tomllib.loads((DEPLOY / "guardian.toml").read_text())
    assert sample["data_dir"] == "/var/lib/guardian"
    assert sample["raft"]["key_file"] == "/run/credentials/guardian.service/raft.key"
    assert sample["tokens_file"] == "/run/credentials/guardian.service/tokens.toml"
    users = (DEPLOY / "systemd" / "guardian.sysusers").read_text()
    assert re.search(r"^u guardian ", users, re.M)


# ------------------------------------------------------------------ Kubernetes

def manifests() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    return [doc for name in sorted(listed) for doc in yaml.safe_load_all((K8S / name).read_text()) if doc]


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in manifests() if d["kind"] == kind]


def test_every_manifest_validates_against_the_kubernetes_schemas_offline() -> None:
    kv = pytest.importorskip("kubernetes_validate")
    docs = manifests()
    assert {d["kind"] for d in docs} >= {"StatefulSet", "Service", "ConfigMap", "Secret", "PodDisruptionBudget"}
    for doc in docs:
        kv.validate(doc, "1.30.0", strict=True)  # raises ValidationError naming the bad field
    bad = {**by_kind("PodDisruptionBudget")[0], "spec": {"minAvailabel": 2}}
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, "1.30.0", strict=True)


def test_the_statefulset_is_a_three_node_raft_group_with_stable_names_and_readiness() -> None:
    (sts,) = by_kind("StatefulSet")
    headless = next(s for s in by_kind("Service") if s["spec"].get("clusterIP") == "None")
    (pdb,) = by_kind("PodDisruptionBudget")
    spec = sts["spec"]
    assert spec["replicas"] == 3 and spec["serviceName"] == headless["metadata"]["name"]
    assert spec["podManagementPolicy"] == "Parallel"  # OrderedReady would wait forever for a leader
    assert headless["spec"]["publishNotReadyAddresses"] is True  # peers resolve before anyone is ready
    assert pdb["spec"]["minAvailable"] == 2
    (container,) = spec["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["data"] == "/var/lib/guardian"
    assert {c["metadata"]["name"] for c in spec["volumeClaimTemplates"]} == {"data"}


@pytest.mark.parametrize("ordinal", [0, 1, 2])
def test_each_pod_derives_its_node_id_and_the_peers_from_its_name(ordinal: int) -> None:
    (sts,) = by_kind("StatefulSet")
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    script = container["args"][0].replace("exec guardian", "printf '%s\\n'", 1)
    done = subprocess.run([*container["command"], script], capture_output=True, text=True, check=True,
                          env={"HOSTNAME": f"guardian-{ordinal}", "PATH": "/usr/bin:/bin"})
    argv = done.stdout.split()
    opt = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--")}
    assert argv[0] == "serve" and opt["--node-id"] == str(ordinal + 1)
    peers, http_peers = opt["--peers"].split(","), opt["--http-peers"].split(",")
    assert peers == [f"guardian-{i}.{sts['spec']['serviceName']}:7001" for i in range(3)]
    assert len(http_peers) == 3 and http_peers[ordinal] == f"https://guardian-{ordinal}.guardian:8080"
    assert opt["--data-dir"] == "/var/lib/guardian"


def test_config_and_secret_load_as_the_service_would(tmp_path: Path) -> None:
    (cm,) = by_kind("ConfigMap")
    (secret,) = by_kind("Secret")
    (sts,) = by_kind("StatefulSet")
    mounts = {m["name"]: m["mountPath"] for m in sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    conf = tomllib.loads(cm["data"]["guardian.toml"])
    secrets_dir = mounts["secrets"]
    assert conf["raft"]["key_file"] == f"{secrets_dir}/raft.key" and conf["tokens_file"] == f"{secrets_dir}/tokens.toml"
    assert set(secret["stringData"]) == {"raft.key", "tokens.toml"}
    (tmp_path / "tokens.toml").write_text(secret["stringData"]["tokens.toml"])
    text = cm["data"]["guardian.toml"].replace(f"{secrets_dir}/", f"{tmp_path}/")
    (tmp_path / "guardian.toml").write_text(text)
    settings = load_settings(tmp_path / "guardian.toml")
    assert {(t.name, t.role) for t in settings.tokens} == {("admin", "admin"), ("alertmanager", "operator"),
                                                           ("grafana", "viewer")}
    assert str(settings.data_dir) == mounts["data"]


def test_the_k8s_api_is_https_only_off_loopback() -> None:
    """Before: the example served bearer tokens over plain HTTP on 0.0.0.0."""
    (cm,) = by_kind("ConfigMap")
    (sts,) = by_kind("StatefulSet")
    http = tomllib.loads(cm["data"]["guardian.toml"])["http"]
    assert http["host"] == "0.0.0.0" and http["tls_cert_file"] and http["tls_key_file"]
    pod = sts["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets["tls"] == "guardian-tls"
    assert all(str(Path(http[k]).parent) == mounts["tls"] for k in ("tls_cert_file", "tls_key_file"))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS", probe
    assert all(p.startswith("https://") for p in container["args"][0].split("--http-peers ")[1].split()[0].split(","))


# ------------------------------------------------------------------ container build file

def test_the_containerfile_installs_the_package_and_runs_guardian_serve_as_non_root() -> None:
    parse = pytest.importorskip("dockerfile_parse")
    df = parse.DockerfileParser(fileobj=io.BytesIO((DEPLOY / "Containerfile").read_bytes()))
    steps = [(s["instruction"], s["value"]) for s in df.structure if s["instruction"] != "COMMENT"]
    assert steps[0][0] == "FROM" and df.baseimage.startswith("python:3.11")
    # every package setuptools ships is copied into the build context it installs from
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    copied = {v.split()[0].rstrip("/") for i, v in steps if i == "COPY" and not v.startswith("--from")}
    assert {p.rstrip("*") for p in packages} <= copied
    for src in copied:
        for part in src.split():
            assert (ROOT / part).exists(), part
    runs = " ".join(v for i, v in steps if i == "RUN")
    # the wheel is built, then installed (as README and the unit say, and tests/e2e/test_wheel_install.py checks)
    assert re.search(r"pip wheel --no-deps --wheel-dir /wheels \.", runs), runs
    assert re.search(r"pip install \"\$\(ls /wheels/kafka_guardian-\*\.whl\)\$\{EXTRAS\}\"", runs), runs
    assert "/opt/guardian/bin/guardian --version" in runs
    final = max(i for i, (ins, _) in enumerate(steps) if ins == "FROM")
    users = [v for ins, v in steps[final:] if ins == "USER"]
    assert users and not users[-1].startswith(("0", "root")), users
    entry = next(v for ins, v in steps if ins == "ENTRYPOINT")
    assert yaml.safe_load(entry) == ["guardian"]
    cmd = yaml.safe_load(df.cmd)
    assert cmd[:3] == ["serve", "--config", "/etc/guardian/guardian.toml"]
    assert "/var/lib/guardian" in cmd and "0.0.0.0" in cmd
