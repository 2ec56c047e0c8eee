"""The tiered gRPC port over TLS and mutual TLS, and idempotent appends across a lost answer and a failover.

TLS: a real tiered node and gRPC server with certificates generated here (a plaintext or unverifying
client is refused, mutual TLS refuses a client without a certificate; plaintext off loopback is refused
unless allowed). Idempotence: a TCP proxy between the client and the node swallows the answer of an
append that commits, then drops the connection; the client's retry is answered with the first group and
the partition holds that group once (without a producer id the same retry stores it twice). Failover:
three member processes; an append is acknowledged, the leader is killed -9, the same request is sent
again (an answer lost with the leader): it is a duplicate; the nodes then go past log compaction and the
killed node, restarted, converges to the same store (producer state included).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from typer.testing import CliRunner

from controlplane.cli.app import app
from kafkasim.broker.tls import TlsFiles, TlsMaterial  # test-only CA generator (Guardian never imports kafkasim)
from raft.localcluster import free_ports
from tests.support.tiered_support import TOKEN, Group
from tiered.client import COPY_STARTED, TieredClient
from tiered.model import PartitionKey
from tiered.node import TieredNode
from tiered.server import PlaintextRefused, ServerTls, start_server


def batch(n: int, base: int) -> list[dict[str, Any]]:
    return [dict(kind=COPY_STARTED, start_offset=base + 100 * i, end_offset=base + 100 * i + 99, leader_epoch=1,
                 size_bytes=1000 + i, remote_path=f"/remote/{base + 100 * i:012d}.log") for i in range(n)]


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    m = TlsMaterial()
    m.write(tmp_path_factory.mktemp("pki"))
    return m


@pytest.fixture(scope="module")
def pki(material: TlsMaterial) -> TlsFiles:
    assert material.files is not None
    return material.files


@pytest.fixture()
def node(tmp_path: Path) -> Iterator[TieredNode]:
    n = TieredNode(f"127.0.0.1:{free_ports(1)[0]}", [], tmp_path / "node", key=None)
    deadline = time.monotonic() + 30
    while not n.status().get("ready"):
        assert time.monotonic() < deadline, "single tiered node not ready"
        time.sleep(0.02)
    try:
        yield n
    finally:
        n.close()


def serve(node: TieredNode, tls: ServerTls | None = None, host: str = "127.0.0.1",
          allow_plaintext: bool = False) -> tuple[grpc.Server, str]:
    address = f"{host}:{free_ports(1)[0]}"
    server = start_server(node, address, lambda token, write: token == TOKEN, {}, tls=tls,
                          allow_plaintext=allow_plaintext)
    return server, address.replace("0.0.0.0", "127.0.0.1")


def groups_of(node: TieredNode, key: PartitionKey) -> int:
    meta, _ = node.store.current_state(key)
    return 0 if meta is None else meta.groups


def test_tls_and_mutual_tls(node: TieredNode, pki: TlsFiles) -> None:
    server, address = serve(node, ServerTls.from_files(pki.server_cert, pki.server_key))
    try:
        client = TieredClient([address], TOKEN, timeout=5, ca_file=pki.ca_file)
        r = client.append_group("c1", "t", 0, 1, batch(2, 0))
        assert list(r.segment_ids) == [1, 2] and not r.duplicate
        assert client.current_state("c1", "t", 0).state.live_segments == 2
        for bad in (TieredClient([address], TOKEN, timeout=1),  # plaintext to a TLS port
                    TieredClient([address], TOKEN, timeout=1, tls=True)):  # system roots: our CA unknown
            with pytest.raises(grpc.RpcError) as refused:
                bad.list_partitions()
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            bad.close()
        client.close()
    finally:
        server.stop(0)

    server, address = serve(node, ServerTls.from_files(pki.server_cert, pki.server_key, pki.ca_file))
    try:
        anonymous = TieredClient([address], TOKEN, timeout=1, ca_file=pki.ca_file)
        with pytest.raises(grpc.RpcError) as no_cert:
            anonymous.list_partitions()
        assert no_cert.value.code() == grpc.StatusCode.UNAVAILABLE
        mutual = TieredClient([address], TOKEN, timeout=5, ca_file=pki.ca_file, cert_file=pki.client_cert,
                              key_file=pki.client_key)
        assert [p.partition.topic_id for p in mutual.list_partitions()] == ["t"]
        with pytest.raises(grpc.RpcError) as bad_token:  # TLS does not replace the token
            TieredClient([address], "wrong", timeout=5, ca_file=pki.ca_file, cert_file=pki.client_cert,
                         key_file=pki.client_key).list_partitions()
        assert bad_token.value.code() == grpc.StatusCode.PERMISSION_DENIED
        anonymous.close()
        mutual.close()
    finally:
        server.stop(0)


def test_plaintext_off_loopback_is_refused_unless_allowed(node: TieredNode) -> None:
    with pytest.raises(PlaintextRefused, match="tls_cert_file"):
        serve(node, host="0.0.0.0")
    server, address = serve(node, host="0.0.0.0", allow_plaintext=True)
    try:
        assert TieredClient([address], TOKEN, timeout=5).list_partitions() == []
    finally:
        server.stop(0)


def test_tiered_cli_verifies_an_https_api_against_its_ca_file(material: TlsMaterial, pki: TlsFiles) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps([{"cluster": "c1", "topic_id": "t", "partition": 0, "leader_epoch": 1, "groups": 2,
                                "events": 4, "live_segments": 2, "remote_bytes": 0}]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.socket = material.server_context().wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{httpd.server_address[1]}"
    try:
        runner = CliRunner()
        ok = runner.invoke(app, ["tiered", "partitions", "--url", url, "--token", "x", "--ca-file", str(pki.ca_file),
                                 "--json"])
        assert ok.exit_code == 0, ok.output
        assert json.loads(ok.stdout)[0]["topic_id"] == "t"
        unknown_ca = runner.invoke(app, ["tiered", "partitions", "--url", url, "--token", "x"])
        assert unknown_ca.exit_code == 1 and "CERTIFICATE_VERIFY_FAILED" in unknown_ca.output
    finally:
        httpd.shutdown()


class DroppingProxy:
    """A TCP proxy; while ``swallow`` is set the server's bytes never reach the client; ``reset`` drops
    every connection (RST) as a network failure would."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.swallow = threading.Event()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.conns += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if not (answers and self.swallow.is_set()):
                    dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def reset(self) -> None:
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RDWR)  # wakes the pump blocked in recv (close alone would not)
            with contextlib.suppress(OSError):
                s.close()

    def close(self) -> None:
        self.listener.close()
        self.reset()


def lost_answer_then_retry(node: TieredNode, client: TieredClient, proxy: DroppingProxy, key: PartitionKey) -> Any:
    """Append through the proxy; the group commits but its answer is swallowed, then the connection drops."""
    assert client.list_partitions(key.cluster) is not None  # the connection is up
    before = groups_of(node, key)
    result: list[Any] = []
    proxy.swallow.set()
    call = threading.Thread(target=lambda: result.append(
        client.append_group(key.cluster, key.topic_id, key.partition, 1, batch(3, 0))))
    call.start()
    deadline = time.monotonic() + 20
    while groups_of(node, key) == before:  # committed and applied: only the answer is missing
        assert time.monotonic() < deadline, "the append never committed"
        time.sleep(0.01)
    time.sleep(0.2)
    proxy.swallow.clear()
    proxy.reset()
    call.join(30)
    assert result, "the append did not return after the retry"
    return result[0]


def test_a_retry_after_a_lost_answer_is_applied_once(node: TieredNode) -> None:
    server, address = serve(node)
    proxy = DroppingProxy(address)
    try:
        key = PartitionKey("c1", "lost", 0)
        client = TieredClient([proxy.address], TOKEN, timeout=30, attempt_timeout=20)
        answer = lost_answer_then_retry(node, client, proxy, key)
        assert answer.duplicate and client.retries >= 1
        groups = client.all_groups("c1", "lost", 0)
        assert [g.group_id for g in groups] == [answer.group_id]
        assert [e.segment_id for e in groups[0].events] == list(answer.segment_ids)
        assert node.duplicates == 1 and node.appended_groups == 1
        # the next group takes the next sequence: applied, not mistaken for the retried one
        assert not client.append_group("c1", "lost", 0, 1, batch(3, 0)).duplicate
        assert groups_of(node, key) == 2

        # without idempotence the same lost answer makes the retry store the group a second time
        plain_key = PartitionKey("c1", "plain", 0)
        plain = TieredClient([proxy.address], TOKEN, timeout=30, idempotent=False)
        plain_answer = lost_answer_then_retry(node, plain, proxy, plain_key)
        assert not plain_answer.duplicate and groups_of(node, plain_key) == 2
        client.close()
        plain.close()
    finally:
        proxy.close()
        server.stop(0)


def converged(group: Group, timeout: float = 90.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    statuses: list[dict[str, Any] | None] = []
    while time.monotonic() < deadline:
        statuses = [m.status() for m in group.members]
        if all(statuses) and len({s["digest"] for s in statuses if s}) == 1 \
                and len({s["store_watermark"] for s in statuses if s}) == 1:
            return [s for s in statuses if s]
        time.sleep(0.25)
    raise AssertionError(f"no convergence: {[(s or {}).get('store_watermark') for s in statuses]}")


@pytest.mark.slow
def test_a_retry_after_the_leader_died_is_applied_once_and_survives_snapshots(tmp_path: Path) -> None:
    group = Group(tmp_path, compaction=50)
    group.start()
    try:
        leader = group.leader(60)
        client = TieredClient(group.grpc_addresses, TOKEN, timeout=20)
        first = client.append_group("c1", "fo", 0, 1, batch(4, 0))
        group.members[leader].kill()  # the answer above could have been lost with the leader
        again = TieredClient(group.grpc_addresses, TOKEN, timeout=20, producer_id=client.producer_id)
        retry = again.append_group("c1", "fo", 0, 1, batch(4, 0), sequence=1)
        assert retry.duplicate and retry.group_id == first.group_id
        assert list(retry.segment_ids) == list(first.segment_ids)
        for i in range(1, 160):  # far past the compaction threshold while the killed node is down
            assert not client.append_group("c1", "fo", 1 + i % 4, 1, batch(1, 1000 * i)).duplicate
        group.members[leader].start()
        statuses = converged(group)
        assert statuses[leader]["snapshot_transfers_installed"] >= 1, statuses[leader]  # behind compaction
        for m in group.members:  # one group on every node; the restarted one got the producer state too
            pinned = client.on(m.grpc_addr)
            assert [g.group_id for g in pinned.all_groups("c1", "fo", 0)] == [first.group_id]
            pinned.close()
        new_leader = group.leader(30)
        assert again.append_group("c1", "fo", 0, 1, batch(4, 0), sequence=1).duplicate, new_leader
        client.close()
        again.close()
    finally:
        group.close()
