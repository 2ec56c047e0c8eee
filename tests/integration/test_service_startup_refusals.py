"""`guardian serve` refuses to start, with one line naming the setting, when its Raft group is unsafe."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from raft.localcluster import free_ports

pytestmark = [pytest.mark.timeout(120)]


def serve(tmp_path: Path, config: str, *extra: str) -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "guardian.toml"
    conf.write_text(config + '[clickhouse]\nmode = "off"\n')
    return subprocess.run([sys.executable, "-m", "controlplane.cli", "serve", "--config", str(conf),
                           "--data-dir", str(tmp_path / "node"), "--port", str(free_ports(1)[0]), *extra],
                          capture_output=True, text=True, timeout=60)


def test_a_multi_node_group_without_a_raft_key_refuses_to_start(tmp_path: Path) -> None:
    a, b, c = free_ports(3)
    done = serve(tmp_path, "", "--node-id", "1", "--peers", f"127.0.0.1:{a},127.0.0.1:{b},127.0.0.1:{c}")
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "raft.key_file" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_an_unreadable_or_short_key_is_named(tmp_path: Path) -> None:
    a, b = free_ports(2)
    peers = ("--node-id", "1", "--peers", f"127.0.0.1:{a},127.0.0.1:{b}")
    done = serve(tmp_path, f'[raft]\nkey_file = "{tmp_path / "missing.key"}"\n', *peers)
    assert done.returncode != 0 and "missing.key" in done.stderr and "Traceback" not in done.stderr
    short = tmp_path / "short.key"
    short.write_text("abc\n")
    done = serve(tmp_path, f'[raft]\nkey_file = "{short}"\n', *peers)
    assert done.returncode != 0 and "short.key" in done.stderr and "Traceback" not in done.stderr
    done = serve(tmp_path, '[raft]\nkey_env = "GUARDIAN_TEST_UNSET_KEY"\n', *peers)
    assert done.returncode != 0 and "GUARDIAN_TEST_UNSET_KEY" in done.stderr


def test_the_k8s_secret_s_sample_key_is_refused_as_a_key(tmp_path: Path) -> None:
    import yaml

    root = Path(__file__).resolve().parents[2]
    secret = next(d for d in yaml.safe_load_all((root / "deploy" / "k8s" / "secret.yaml").read_text())
                  if d and d["kind"] == "Secret")
    sample = tmp_path / "raft.key"
    sample.write_text(secret["stringData"]["raft.key"] + "\n")
    sample.chmod(0o600)
    a, b = free_ports(2)
    done = serve(tmp_path, f'[raft]\nkey_file = "{sample}"\n', "--node-id", "1", "--peers",
                 f"127.0.0.1:{a},127.0.0.1:{b}")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "raft.key" in errors[0] and "not a key" in errors[0], done.stderr
