"""Outbound webhooks against a local HTTP receiver: the generic JSON and the Slack payloads, the kinds filter,
retries with backoff that end in a delivery, and the dead-letter record of an event no attempt delivered."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from controlplane.service.notify import Notifier

EVENT = {"event": "anomaly.confirmed", "cluster": "c1", "kind": "broker-dead", "anomaly_id": 7,
         "text": "broker 2 dead for 301 s", "evidence": {"dead_for_s": 301}}


class Receiver:
    """Records every POST per path; ``fail[path] = n`` answers the next n posts to ``path`` with HTTP 500."""

    def __init__(self) -> None:
        self.posts: dict[str, list[Any]] = {}
        self.attempts: dict[str, int] = {}
        self.fail: dict[str, int] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.attempts[self.path] = outer.attempts.get(self.path, 0) + 1
                if outer.fail.get(self.path, 0) > 0:
                    outer.fail[self.path] -= 1
                    self.send_response(500)
                    self.end_headers()
                    return
                assert self.headers["Content-Type"] == "application/json"
                outer.posts.setdefault(self.path, []).append(json.loads(body))
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


def dead_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_json_and_slack_payloads_and_the_kinds_filter(receiver: Receiver, tmp_path: Path) -> None:
    n = Notifier([{"url": receiver.url + "/json", "format": "json"},
                  {"url": receiver.url + "/slack", "format": "slack"},
                  {"url": receiver.url + "/disks", "format": "json", "kinds": ["disk-fail-slow"]}],
                 dead_letter=tmp_path / "dead.jsonl", backoff_s=0.01)
    t0 = time.monotonic()
    n.send(EVENT)
    n.send({**EVENT, "kind": "disk-fail-slow", "anomaly_id": 8, "text": "disk /data1 of broker 3 is fail-slow"})
    assert time.monotonic() - t0 < 0.05, "send never waits for the network"
    n.flush()
    assert receiver.posts["/json"] == [{"source": "guardian", **EVENT},
                                       {"source": "guardian", **EVENT, "kind": "disk-fail-slow", "anomaly_id": 8,
                                        "text": "disk /data1 of broker 3 is fail-slow"}]
    assert [p["text"] for p in receiver.posts["/slack"]] == [
        ":rotating_light: [guardian/c1] broker 2 dead for 301 s",
        ":rotating_light: [guardian/c1] disk /data1 of broker 3 is fail-slow"]
    assert all(set(p) == {"text"} for p in receiver.posts["/slack"])
    assert [p["anomaly_id"] for p in receiver.posts["/disks"]] == [8]
    assert (n.sent, n.failed) == (5, 0) and dead_records(tmp_path / "dead.jsonl") == []


def test_retries_then_delivery(receiver: Receiver, tmp_path: Path) -> None:
    receiver.fail["/flaky"] = 2
    n = Notifier([{"url": receiver.url + "/flaky", "retries": 3}], dead_letter=tmp_path / "dead.jsonl",
                 backoff_s=0.01)
    n.send(EVENT)
    n.flush()
    assert receiver.attempts["/flaky"] == 3 and receiver.posts["/flaky"] == [{"source": "guardian", **EVENT}]
    assert (n.sent, n.failed) == (1, 0) and dead_records(tmp_path / "dead.jsonl") == []


def test_an_event_never_accepted_is_dead_lettered_with_its_last_error(receiver: Receiver, tmp_path: Path) -> None:
    receiver.fail["/down"] = 100
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    dead = tmp_path / "sub" / "dead.jsonl"
    n = Notifier([{"url": receiver.url + "/down", "retries": 2},
                  {"url": f"http://127.0.0.1:{closed}/x", "retries": 1, "timeout_s": 1.0}],
                 dead_letter=dead, backoff_s=0.01)
    n.send(EVENT)
    n.flush()
    assert receiver.attempts["/down"] == 3, "1 attempt + 2 retries"
    records = dead_records(dead)
    assert [r["target"] for r in records] == [receiver.url + "/down", f"http://127.0.0.1:{closed}/x"]
    assert "HTTP Error 500" in records[0]["error"] and "URLError" in records[1]["error"]
    assert all(r["event"] == EVENT and r["at"] > 0 for r in records)
    assert (n.sent, n.failed) == (0, 2)


def test_no_target_is_a_no_op_and_a_full_queue_is_dead_lettered(tmp_path: Path) -> None:
    Notifier([], dead_letter=tmp_path / "dead.jsonl").send(EVENT)
    assert not (tmp_path / "dead.jsonl").exists()
    gate = threading.Event()

    def slow_post(url: str, body: bytes, timeout_s: float) -> int:
        gate.wait(5)
        return 200

    n = Notifier([{"url": "http://unused"}], dead_letter=tmp_path / "dead.jsonl", post=slow_post)
    for i in range(1002):  # one in the sender's hands, 1,000 queued, the rest refused
        n.send({**EVENT, "anomaly_id": i})
    gate.set()
    n.flush()
    records = dead_records(tmp_path / "dead.jsonl")
    assert records and all(r["error"] == "notification queue full" for r in records)
    assert n.sent + len(records) == 1002
