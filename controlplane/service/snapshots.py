"""The latest snapshot of each cluster, as the leader's collectors (or an operator's import) left it.

Snapshots are large and re-collected every interval, so they are kept in memory on the node that
acts, not in the replicated state; plans record the ``taken_at`` of the snapshot they were made from.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from controlplane.domain import ClusterSnapshot


class StaleSnapshotError(LookupError):
    """No snapshot, or one older than allowed: nothing may act on this cluster."""


class SnapshotCache:
    """Thread-safe map cluster -> latest snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, ClusterSnapshot] = {}

    def put(self, snapshot: ClusterSnapshot) -> None:
        """Keep ``snapshot`` unless a newer one for its cluster is already held."""
        with self._lock:
            old = self._latest.get(snapshot.cluster)
            if old is None or old.taken_at <= snapshot.taken_at:
                self._latest[snapshot.cluster] = snapshot

    def get(self, cluster: str) -> ClusterSnapshot | None:
        """The latest snapshot of ``cluster`` or None."""
        with self._lock:
            return self._latest.get(cluster)

    def fresh(self, cluster: str, max_age_s: float, now: datetime | None = None) -> ClusterSnapshot:
        """The latest snapshot if it is at most ``max_age_s`` old; else :class:`StaleSnapshotError`."""
        snapshot = self.get(cluster)
        if snapshot is None:
            raise StaleSnapshotError(f"no snapshot of cluster {cluster!r} yet")
        age = ((now or datetime.now(UTC)) - snapshot.taken_at).total_seconds()
        if age > max_age_s:
            raise StaleSnapshotError(f"snapshot of cluster {cluster!r} is {age:.0f} s old (limit {max_age_s:.0f} s)")
        return snapshot

    def drop(self, cluster: str) -> None:
        """Forget ``cluster``."""
        with self._lock:
            self._latest.pop(cluster, None)
