"""Outbound webhooks for anomalies and the actions self-healing takes: generic JSON or a Slack-compatible
payload, with retries and a dead-letter record.

Goal: tell the on-call about what Guardian found and did, without ever slowing or crashing a loop.

Method: :meth:`Notifier.send` queues the event; one daemon thread posts it to every configured target
(``[[notifications]]`` in the config: ``url``, ``format`` = ``json`` | ``slack``, ``kinds`` to filter,
``retries``, ``timeout_s``), retrying with exponential backoff; an event a target never accepted is appended
to ``data_dir/notifications-dead.jsonl`` with the last error. The generic payload is
``{"source": "guardian", "event", "cluster", "anomaly": {...}, "text"}``; the Slack payload is ``{"text"}``.

Guarantee: ``send`` never blocks on the network and never raises; the queue is bounded (the oldest events
are dead-lettered when it overflows). Cost: one POST per event and target.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
QUEUE_LIMIT = 1000

Post = Callable[[str, bytes, float], int]
"""Port: (url, body, timeout_s) -> HTTP status (raises on a transport error)."""


def http_post(url: str, body: bytes, timeout_s: float) -> int:
    """POST JSON ``body`` to ``url``; the HTTP status."""
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return int(resp.status)


def payload(fmt: str, event: Mapping[str, Any]) -> dict[str, Any]:
    """The body for one target format."""
    if fmt == "slack":
        return {"text": f":rotating_light: [guardian/{event.get('cluster', '?')}] {event.get('text', '')}"}
    return {"source": "guardian", **event}


class Notifier:
    """Queue + one sender thread (see the module docstring)."""

    def __init__(self, targets: Sequence[Mapping[str, Any]], dead_letter: Path | None = None,
                 post: Post = http_post, backoff_s: float = 0.5) -> None:
        self.targets = [dict(t) for t in targets]
        self.dead_letter = dead_letter
        self.post = post
        self.backoff_s = backoff_s
        self.sent = 0
        self.failed = 0
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=QUEUE_LIMIT)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def send(self, event: Mapping[str, Any]) -> None:
        """Queue ``event`` for every target whose ``kinds`` (if any) name its kind; never blocks or raises."""
        if not self.targets:
            return
        try:
            self._queue.put_nowait(dict(event))
        except queue.Full:
            self._dead({"event": dict(event)}, "notification queue full")
            return
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="notify", daemon=True)
                self._thread.start()

    def flush(self, timeout_s: float = 10.0) -> None:
        """Wait until the queue is drained (tests)."""
        end = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < end:
            time.sleep(0.01)

    def _run(self) -> None:
        while True:
            try:
                event = self._queue.get(timeout=5.0)
            except queue.Empty:
                return
            try:
                for target in self.targets:
                    kinds = target.get("kinds") or []
                    if kinds and event.get("kind") not in kinds:
                        continue
                    self._deliver(target, event)
            finally:
                self._queue.task_done()

    def _deliver(self, target: Mapping[str, Any], event: Mapping[str, Any]) -> None:
        body = json.dumps(payload(str(target.get("format", "json")), event), default=str).encode()
        error = ""
        for attempt in range(int(target.get("retries", 3)) + 1):
            try:
                status = self.post(str(target["url"]), body, float(target.get("timeout_s", 5.0)))
                if 200 <= status < 300:
                    self.sent += 1
                    return
                error = f"HTTP {status}"
            except Exception as exc:  # a webhook's failure is recorded, never raised
                error = f"{type(exc).__name__}: {exc}"
            time.sleep(self.backoff_s * (2 ** attempt))
        self.failed += 1
        self._dead({"target": target.get("url"), "event": dict(event)}, error)

    def _dead(self, record: dict[str, Any], error: str) -> None:
        log.warning("notification not delivered: %s", error)
        if self.dead_letter is None:
            return
        try:
            self.dead_letter.parent.mkdir(parents=True, exist_ok=True)
            with self.dead_letter.open("a") as fh:
                fh.write(json.dumps({**record, "error": error, "at": time.time()}, default=str) + "\n")
        except OSError as exc:
            log.warning("dead-letter record not written: %s", exc)
