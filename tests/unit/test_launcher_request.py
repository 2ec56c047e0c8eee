"""ServiceCluster.request: an answer that breaks off is 'no answer' (0, why), never an exception.

A node killed -9 between the headers and the body of its response leaves the client with
``http.client.IncompleteRead``, which is not an OSError; raised, it ended the reliability test's writer
thread silently, and the test then saw no write acknowledged after the failover.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.launcher import ServiceCluster


def _read_request(conn: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data and (chunk := conn.recv(65536)):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    while length and len(body) < int(length.group(1)) and (chunk := conn.recv(65536)):
        body += chunk


@pytest.fixture()
def truncating_port() -> Iterator[int]:
    """A port whose server sends a response's headers and part of its body, then closes (a killed node)."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                _read_request(conn)  # all of it: closing on unread bytes would reset the connection instead
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"fi")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    stop.set()
    srv.close()


def test_a_response_cut_off_after_its_headers_is_no_answer(tmp_path: Path, truncating_port: int) -> None:
    cluster = ServiceCluster(tmp_path)
    cluster.http_ports[0] = truncating_port
    code, why = cluster.request(1, "POST", "/api/v1/ids", {"count": 1}, timeout=2.0)
    assert code == 0 and "IncompleteRead" in why
