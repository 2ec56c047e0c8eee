"""Shared piece of the Raft reliability tests: a writer that follows the leader."""

from __future__ import annotations

import threading
import time
from typing import Any

from raft.localcluster import LocalCluster


class Writer(threading.Thread):
    """Streams puts (and every 7th an ID allocation) to whichever node leads, following hints.

    Records only *acknowledged* writes: ``acked[key] = value`` and ``id_blocks`` in ack order.
    """

    def __init__(self, cluster: LocalCluster, start_at: int = 0, prefix: str = "w") -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.prefix = prefix
        self.seq = start_at
        self.acked: dict[str, int] = {}
        self.ack_times: list[tuple[float, int]] = []  # (monotonic time, node index)
        self.id_blocks: list[tuple[int, int]] = []
        self.failures = 0
        self.stop_flag = threading.Event()
        self.target = 0

    def run(self) -> None:
        n = len(self.cluster.nodes)
        while not self.stop_flag.is_set():
            self.seq += 1
            if self.seq % 7 == 0:
                cmd: dict[str, Any] = {"type": "allocate_ids", "count": 5}
            else:
                cmd = {"type": "put", "key": f"{self.prefix}-{self.seq}", "value": self.seq}
            try:
                code, body, _ = self.cluster.nodes[self.target].propose(cmd, timeout=3.0)
            except OSError:
                code, body = None, {}
            if code == 200:
                self.ack_times.append((time.monotonic(), self.target))
                if cmd["type"] == "put":
                    self.acked[cmd["key"]] = cmd["value"]
                else:
                    self.id_blocks.append((body["result"]["first"], body["result"]["last"]))
                continue
            self.failures += 1
            hinted = self.cluster.index_of(body.get("leader")) if code == 503 else None
            if hinted is not None and hinted != self.target and self.cluster.nodes[hinted].alive:
                self.target = hinted
            else:
                self.target = (self.target + 1) % n
                time.sleep(0.01)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(timeout=15)

    def acks_after(self, t: float, exclude: int | None = None) -> list[float]:
        """Times of acknowledgements after ``t`` from nodes other than ``exclude``."""
        return [a for a, node in self.ack_times if a > t and node != exclude]
