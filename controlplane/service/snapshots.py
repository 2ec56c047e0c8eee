"""The latest snapshot of each cluster, as the leader's collectors (or an operator's import) left it.

Snapshots are large and re-collected every interval, so they are kept in memory on the node that
acts, not in the replicated state; plans record the ``taken_at`` of the snapshot they were made from.
When a cluster's login is refused, the observer records that here too, so whoever asks for a
snapshot is told why there is none (:class:`ClusterLoginRefused`) instead of "not yet".
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from domain import ClusterSnapshot
from kafkaio.errors import KafkaAuthError


class StaleSnapshotError(LookupError):
    """No snapshot, or one older than allowed: nothing may act on this cluster."""


class ClusterLoginRefused(StaleSnapshotError):
    """No usable snapshot because the cluster refuses Guardian's credentials or TLS trust (an operator must act).

    ``cluster`` and ``security`` (protocol, mechanism, user — never a secret) name what was refused.
    """

    def __init__(self, message: str, cluster: str, security: str) -> None:
        super().__init__(message)
        self.cluster = cluster
        self.security = security


class SnapshotCache:
    """Thread-safe map cluster -> latest snapshot and when this node observed it.

    Age is measured on this node's clock from ``observed_at`` (a live collection round: the moment it
    finished; an imported file: its own ``taken_at``), so a cluster whose metrics carry another clock
    (a simulator running faster than real time) is judged by how recently it was actually seen.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, tuple[ClusterSnapshot, datetime]] = {}
        self._refused: dict[str, KafkaAuthError] = {}

    def put(self, snapshot: ClusterSnapshot, observed_at: datetime | None = None) -> None:
        """Keep ``snapshot`` unless a more recently observed one for its cluster is already held."""
        seen = observed_at or snapshot.taken_at
        with self._lock:
            old = self._latest.get(snapshot.cluster)
            if old is None or old[1] <= seen:
                self._latest[snapshot.cluster] = (snapshot, seen)

    def refuse(self, cluster: str, error: KafkaAuthError | None) -> None:
        """Record that the last observation of ``cluster`` was refused by its login (None: it was not)."""
        with self._lock:
            if error is None:
                self._refused.pop(cluster, None)
            else:
                self._refused[cluster] = error

    def refusal(self, cluster: str) -> KafkaAuthError | None:
        """The login refusal of the last observation of ``cluster`` (None when it was not refused)."""
        with self._lock:
            return self._refused.get(cluster)

    def get(self, cluster: str) -> ClusterSnapshot | None:
        """The latest snapshot of ``cluster`` or None."""
        with self._lock:
            entry = self._latest.get(cluster)
        return entry[0] if entry else None

    def observed_at(self, cluster: str) -> datetime | None:
        """When this node observed the latest snapshot of ``cluster`` (None when there is none)."""
        with self._lock:
            entry = self._latest.get(cluster)
        return None if entry is None else entry[1]

    def age_s(self, cluster: str, now: datetime | None = None) -> float | None:
        """Seconds since the latest snapshot of ``cluster`` was observed (None when there is none)."""
        seen = self.observed_at(cluster)
        return None if seen is None else ((now or datetime.now(UTC)) - seen).total_seconds()

    def fresh(self, cluster: str, max_age_s: float, now: datetime | None = None) -> ClusterSnapshot:
        """The latest snapshot if it is at most ``max_age_s`` old; else :class:`StaleSnapshotError`
        (:class:`ClusterLoginRefused` when the cluster's last observation was refused by its login)."""
        snapshot = self.get(cluster)
        age = self.age_s(cluster, now)
        if snapshot is None or age is None or age > max_age_s:
            refused = self.refusal(cluster)
            if refused is not None:
                raise ClusterLoginRefused(f"no usable snapshot of cluster {cluster!r}: {refused}",
                                          refused.cluster or cluster, refused.security)
        if snapshot is None or age is None:
            raise StaleSnapshotError(f"no snapshot of cluster {cluster!r} yet")
        if age > max_age_s:
            raise StaleSnapshotError(f"snapshot of cluster {cluster!r} is {age:.0f} s old (limit {max_age_s:.0f} s)")
        return snapshot

    def entries(self) -> list[tuple[ClusterSnapshot, datetime]]:
        """Every cluster's latest snapshot with when this node observed it (cluster order)."""
        with self._lock:
            return [self._latest[c] for c in sorted(self._latest)]

    def drop(self, cluster: str) -> None:
        """Forget ``cluster``."""
        with self._lock:
            self._latest.pop(cluster, None)
            self._refused.pop(cluster, None)


def partition_ingress(cache: SnapshotCache, cluster: str, topic: str, partition: int) -> float:
    """Producers' bytes/s into a partition per the latest snapshot (0 when unknown)."""
    snapshot = cache.get(cluster)
    p = snapshot.index.partition_by_id.get((topic, partition)) if snapshot is not None else None
    return p.bytes_in_per_s if p is not None else 0.0
