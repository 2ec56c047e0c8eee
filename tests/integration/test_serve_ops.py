"""Operating `guardian serve` and `guardian cluster` as real processes: logs, secrets, ports, TLS, failover.

Each test spawns real processes (``python -m controlplane.cli ...``) on loopback and reads what an operator
would: stderr, exit codes, the files written, HTTPS answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.launcher import ApiTls, ServiceCluster
from kafkasim.broker.tls import TlsFiles, TlsMaterial  # test-only CA generator (Guardian never imports kafkasim)
from raft.localcluster import free_ports

pytestmark = [pytest.mark.timeout(180)]
CLI = [sys.executable, "-m", "controlplane.cli"]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(Path(__file__).resolve().parents[2]))}


def start_serve(tmp_path: Path, config: str, *extra: str) -> tuple[subprocess.Popen[str], int]:
    port = free_ports(1)[0]
    conf = tmp_path / "guardian.toml"
    conf.write_text(config)
    proc = subprocess.Popen([*CLI, "serve", "--config", str(conf), "--data-dir", str(tmp_path / "node"),
                             "--port", str(port), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env(), start_new_session=True)
    return proc, port


def stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=10)
    return out, err


def get(url: str, token: str | None = None, context: ssl.SSLContext | None = None,
        timeout: float = 2.0) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_http(url: str, context: ssl.SSLContext | None = None, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if get(url, context=context)[0] == 200:
                return
        time.sleep(0.2)
    raise TimeoutError(url)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsMaterial, TlsFiles]:
    material = TlsMaterial()
    return material, material.write(tmp_path_factory.mktemp("pki"))


# ---------------------------------------------------------------- logging and secrets

def test_serve_logs_one_json_line_per_event_with_no_secret(tmp_path: Path) -> None:
    """Before: stderr was empty and the ClickHouse URL's password reached the log in a warning."""
    dead = free_ports(1)[0]
    proc, port = start_serve(tmp_path, f'[clickhouse]\nmode = "url"\nurl = "http://default:Ch-Pw-4417@127.0.0.1:{dead}/"\n'
                                       '[logging]\nformat = "json"\n', "--log-level", "INFO")
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
        token = (tmp_path / "node" / "admin.token").read_text().strip()
        assert get(f"http://127.0.0.1:{port}/api/v1/clusters", token)[0] == 200
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            code, body = get(f"http://127.0.0.1:{port}/api/v1/status", token)
            if code == 200 and json.loads(body)["raft"]["is_leader"]:
                break
            time.sleep(0.2)
        time.sleep(1.5)  # the watchdog notes leadership within a second
    finally:
        _, err = stop(proc)
    lines = [line for line in err.splitlines() if line.strip()]
    docs = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"ts", "level", "logger", "msg"} <= set(d) for d in docs)
    messages = " ".join(d["msg"] for d in docs)
    assert "serving http://127.0.0.1" in messages and "ClickHouse unavailable" in messages
    assert "this node leads" in messages
    from controlplane import __version__
    assert f"guardian {__version__} (kafka-guardian, Python 3." in messages  # the version, logged at start
    assert "Ch-Pw-4417" not in err and token not in err
    assert "default:***@127.0.0.1" in messages


def test_a_bad_log_level_is_refused(tmp_path: Path) -> None:
    conf = tmp_path / "g.toml"
    conf.write_text('[clickhouse]\nmode = "off"\n')
    done = subprocess.run([*CLI, "serve", "--config", str(conf), "--log-level", "LOUD"], capture_output=True,
                          text=True, env=env(), timeout=60)
    assert done.returncode == 2 and "--log-level" in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------- port clashes

@contextlib.contextmanager
def listening() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def test_http_port_in_use_exits_2_with_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "g.toml"
    conf.write_text('[clickhouse]\nmode = "off"\n')
    with listening() as taken:
        done = subprocess.run([*CLI, "serve", "--config", str(conf), "--data-dir", str(tmp_path / "n"),
                               "--port", str(taken)], capture_output=True, text=True, env=env(), timeout=60)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(taken) in errors[0] and "http.port" in errors[0], done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 3


def test_raft_port_in_use_exits_2_with_one_line(tmp_path: Path) -> None:
    conf = tmp_path / "g.toml"
    with listening() as taken:
        conf.write_text(f'[raft]\nself_addr = "127.0.0.1:{taken}"\n[clickhouse]\nmode = "off"\n')
        done = subprocess.run([*CLI, "serve", "--config", str(conf), "--data-dir", str(tmp_path / "n"),
                               "--port", str(free_ports(1)[0])], capture_output=True, text=True, env=env(), timeout=60)
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(taken) in errors[0] and "raft.self_addr" in errors[0], done.stderr
    assert "Traceback" not in done.stderr


def test_cluster_with_a_taken_port_exits_2_with_one_line(tmp_path: Path) -> None:
    with listening() as taken:
        done = subprocess.run([*CLI, "cluster", "--nodes", "1", "--root", str(tmp_path), "--http-port", str(taken)],
                              capture_output=True, text=True, env=env(), timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"port {taken}" in done.stderr and "--http-port" in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------- TLS

def test_tls_serves_https_only_and_requires_client_certs_when_asked(tmp_path: Path,
                                                                   pki: tuple[TlsMaterial, TlsFiles]) -> None:
    material, files = pki
    proc, port = start_serve(tmp_path, f'[clickhouse]\nmode = "off"\n[http]\ntls_cert_file = "{files.server_cert}"\n'
                                       f'tls_key_file = "{files.server_key}"\ntls_client_ca_file = "{files.ca_file}"\n',
                             "--log-level", "INFO")
    try:
        wait_http(f"https://127.0.0.1:{port}/healthz", material.client_context(with_client_cert=True))
        token = (tmp_path / "node" / "admin.token").read_text().strip()
        code, _ = get(f"https://127.0.0.1:{port}/api/v1/clusters", token, material.client_context(True))
        assert code == 200
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            get(f"https://127.0.0.1:{port}/api/v1/clusters", token, material.client_context(False))
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            get(f"http://127.0.0.1:{port}/healthz")  # no plain HTTP on the TLS port
        with pytest.raises((ssl.SSLError, urllib.error.URLError)):
            get(f"https://127.0.0.1:{port}/healthz", context=ssl.create_default_context())  # unknown CA
    finally:
        _, err = stop(proc)
    assert "serving https://127.0.0.1" in err and "client certificates required" in err
    assert token not in err


def test_public_bind_without_tls_warns_loudly(tmp_path: Path) -> None:
    proc, port = start_serve(tmp_path, '[clickhouse]\nmode = "off"\n', "--host", "0.0.0.0")
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz")
    finally:
        _, err = stop(proc)
    warning = [line for line in err.splitlines() if "WITHOUT TLS" in line]
    assert len(warning) == 1 and "WARNING" in warning[0] and "tls_cert_file" in warning[0]


def test_unreadable_tls_files_are_named(tmp_path: Path) -> None:
    conf = tmp_path / "g.toml"
    conf.write_text(f'[clickhouse]\nmode = "off"\n[http]\ntls_cert_file = "{tmp_path / "none.pem"}"\n'
                    f'tls_key_file = "{tmp_path / "none-key.pem"}"\n')
    done = subprocess.run([*CLI, "serve", "--config", str(conf), "--data-dir", str(tmp_path / "n"),
                           "--port", str(free_ports(1)[0])], capture_output=True, text=True, env=env(), timeout=60)
    assert done.returncode == 1 and "http.tls_cert_file" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def follower_redirect(group: ServiceCluster, leader: int) -> str:
    """Where a follower of ``leader`` redirects a write (its ``Location``), once it knows who leads."""
    follower = next(n for n in group.procs if n != leader)
    leader_addr = f"127.0.0.1:{group.raft_ports[leader - 1]}"
    deadline = time.monotonic() + 10
    while (group.status(follower) or {}).get("leader") != leader_addr and time.monotonic() < deadline:
        time.sleep(0.05)  # a follower learns who leads from the leader's next heartbeat
    code, _ = group.request(follower, "POST", "/api/v1/ids?x=1", {"count": 1})
    assert code == 307
    req = urllib.request.Request(f"{group.url(follower)}/api/v1/ids?x=1", method="POST",
                                 data=b'{"count": 1}',
                                 headers={"Authorization": f"Bearer {group.token}",
                                          "Content-Type": "application/json"})
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=group.client_context()))

    class Keep(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener.add_handler(Keep())
    with pytest.raises(urllib.error.HTTPError) as redirect:
        opener.open(req, timeout=5)
    return str(redirect.value.headers["Location"])


def test_a_follower_redirects_writes_to_the_leader_over_https(tmp_path: Path,
                                                              pki: tuple[TlsMaterial, TlsFiles]) -> None:
    _, files = pki
    group = ServiceCluster(tmp_path, size=3, tls=ApiTls(files.server_cert, files.server_key, files.ca_file))
    group.start_all()
    try:
        group.wait_up(timeout=60)
        for _attempt in range(3):  # on a loaded machine an election may come between the reads: then again
            leader = group.leader(timeout=30)
            location = follower_redirect(group, leader)
            if location == f"{group.url(leader)}/api/v1/ids?x=1" or group.leader(timeout=30) == leader:
                break
        assert location == f"{group.url(leader)}/api/v1/ids?x=1" and location.startswith("https://")
        code, body = group.request(leader, "POST", "/api/v1/ids", {"count": 1})
        assert code in (200, 201), body
    finally:
        group.close()


# ---------------------------------------------------------------- make cluster

def serve_pids(http_port: int) -> list[int]:
    """Pids of `guardian serve` processes started with ``--port http_port``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                at = argv.index(b"--port") if b"serve" in argv and b"--port" in argv else -1
                if at >= 0 and argv[at + 1] == str(http_port).encode():
                    found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_cluster_has_a_fresh_private_token_and_survives_a_dead_node(tmp_path: Path) -> None:
    tokens = []
    for run in range(2):
        proc = subprocess.Popen([*CLI, "cluster", "--nodes", "3", "--root", str(tmp_path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env={**env(), "PYTHONUNBUFFERED": "1"},
                                start_new_session=True)
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:  # the group did not come up: show why
                proc.wait(timeout=60)
                pytest.fail(f"`guardian cluster` printed no endpoints (exit {proc.returncode}): "
                            f"{proc.stderr.read() if proc.stderr else ''}")
            info = json.loads(line)
            tokens.append(info["token"])
            token_file = Path(info["token_file"])
            assert token_file.read_text().strip() == info["token"]
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert info["token"] not in (tmp_path / "guardian.toml").read_text()
            if run == 1:
                leader_url = info["nodes"][info["leader"] - 1]
                pids = serve_pids(int(leader_url.rsplit(":", 1)[1]))
                assert len(pids) == 1
                os.kill(pids[0], signal.SIGKILL)
                others = [u for u in info["nodes"] if u != leader_url]
                deadline = time.monotonic() + 30
                led = False
                while time.monotonic() < deadline and not led:  # a new leader is elected among the survivors
                    for url in others:
                        with contextlib.suppress(OSError):
                            code, body = get(f"{url}/api/v1/status", info["token"])
                            led = led or (code == 200 and json.loads(body)["raft"]["is_leader"])
                    time.sleep(0.3)
                assert led and proc.poll() is None  # the group kept running
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        if run == 1:
            assert "exited" in err and "2 of 3 still running" in err
    assert tokens[0] != tokens[1]
