"""Fakes for the executor's follower reads (:mod:`controlplane.executor.read_source`) in unit tests.

:class:`RacingController` is the in-memory cluster (:mod:`kafkaio.fake`) with a controller whose preferred
elections race the reassignments sent just before them; :class:`StaticDisks` is a disk-load port with fixed
utils (one busy disk makes its leader's copies read from a follower); :func:`follower_read_setup` builds
the one-partition case the tests drive.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from collectors.disk_rates import DiskRate
from controlplane.executor.migration_rate import MigrationRatePolicy
from controlplane.executor.reconcile import Executor, ExecutorConfig
from controlplane.state.store import LocalStateStore, StateStore
from domain import PartitionMove, Plan
from kafkaio.fake import ELECTION_NOT_NEEDED, FakeKafkaCluster
from kafkaio.types import TP

GB = 1_000_000_000
TP0: TP = ("t", 0)


class RacingController(FakeKafkaCluster):
    """A cluster whose controller decides a preferred election on the replica order from before the last
    reassignment it accepted, for ``lag`` metadata reads after accepting it (``lag`` 1: only an election in
    the same pass as the reassignment; 2: also one in the next pass, though the metadata already shows the
    new order): ELECTION_NOT_NEEDED when that old order's first replica leads — the reorder has not landed
    for the election. A reassignment that adds no replica (a reorder) completes at once, as Kafka's does;
    copies complete as :class:`~kafkaio.fake.FakeKafkaCluster` lets them (``copy``, ``finish``)."""

    def __init__(self, brokers: Mapping[int, Sequence[str]], *, lag: int = 1, **kwargs: Any) -> None:
        super().__init__(brokers, **kwargs)
        self.lag = lag
        self.before: dict[TP, tuple[list[int], int]] = {}
        """Partition -> (replica order the controller still decides elections on, metadata reads left)."""
        self.answers: list[tuple[TP, int]] = []
        """Every election answer, in order."""
        self.lagging: set[tuple[TP, int]] = set()
        """(partition, broker) kept out of the ISR (:meth:`leave_isr`)."""

    def alter_reassignments(self, targets: Mapping[TP, list[int] | None]) -> dict[TP, str | None]:
        old = {tp: list(p.replicas) for tp in targets if (p := self._get(tp)) is not None}
        out = super().alter_reassignments(targets)
        accepted = [tp for tp, err in out.items() if err is None and targets[tp] is not None and tp in old]
        for tp in accepted:
            self.before[tp] = (self.before.get(tp, (old[tp], 0))[0], self.lag)
        self.finish([tp for tp in accepted if sorted(targets[tp] or ()) == sorted(old[tp])])
        return out

    def live(self) -> Any:
        for tp, (old, left) in list(self.before.items()):
            if left <= 1:
                del self.before[tp]
            else:
                self.before[tp] = (old, left - 1)
        self._lag_isr()
        return super().live()

    def leave_isr(self, tp: TP, broker: int) -> None:
        """``broker`` falls out of the partition's ISR for good (alive, lagging); when it led, the first other
        in-sync replica is elected, as Kafka's controller does."""
        self.lagging.add((tp, broker))
        self._lag_isr()

    def _lag_isr(self) -> None:
        for tp, broker in self.lagging:
            p = self._get(tp)
            if p is not None and broker in p.isr:
                p.isr = [b for b in p.isr if b != broker]
                if p.leader == broker:
                    p.leader = p.isr[0] if p.isr else -1

    def elect_preferred(self, partitions: Iterable[TP]) -> dict[TP, int]:
        tps = list(partitions)
        racing = [tp for tp in tps if tp in self.before and (p := self._get(tp)) is not None
                  and p.leader == self.before[tp][0][0]]
        out = super().elect_preferred([tp for tp in tps if tp not in racing]) if len(racing) < len(tps) else {}
        if racing:
            self.calls.append(("elect_preferred", racing))
        out.update({tp: ELECTION_NOT_NEEDED for tp in racing})
        self.answers += [(tp, out[tp]) for tp in tps]
        return out


class StaticDisks:
    """A :class:`~collectors.disk_rates.DiskLoad` with fixed utils (``busy``: disk -> util, others 0.1) and a
    clock that moves 5 s per scrape."""

    def __init__(self, disks: Iterable[tuple[int, str]], busy: Mapping[tuple[int, str], float]) -> None:
        self.disks = sorted(disks)
        self.busy = dict(busy)
        self._clock = 0.0

    @property
    def clock(self) -> float | None:
        return self._clock or None

    @property
    def network(self) -> Mapping[int, tuple[float, float, float]]:
        return {}

    def scrape(self, brokers: set[int] | None = None) -> dict[tuple[int, str], DiskRate]:
        self._clock += 5.0
        return {d: DiskRate(self.busy.get(d, 0.1), self.busy.get(d, 0.1) * 200e6, 200e6)
                for d in self.disks if brokers is None or d[0] in brokers}


def follower_read_executor(fake: FakeKafkaCluster, store: StateStore, max_attempts: int = 5) -> Executor:
    """An executor with follower reads on (adaptive throttle) whose disk load shows broker 1's disk busy."""
    disks = [(b, d) for b, ds in fake.log_dir_paths.items() for d in ds]
    policy = MigrationRatePolicy(mode="adaptive", util_threshold=0.75, initial=20e6, follower_reads=True)
    return Executor(store, fake, ExecutorConfig("c1", throttle=policy, max_attempts=max_attempts),
                    scraper=StaticDisks(disks, {(1, "/d1"): 0.6}))


def follower_read_setup(lag: int, max_attempts: int = 5) -> tuple[RacingController, Executor, int]:
    """Brokers 1-4 (one disk each); ``t-0`` on [1, 2] led by 1, whose disk is busy; the plan moves it to
    [3, 2] (1 leaves, 3 leads in the end), so its copy reads from follower 2. Started, nothing sent yet."""
    fake = RacingController({b: ("/d1",) for b in (1, 2, 3, 4)}, lag=lag)
    fake.add_topic("t", [[1, 2]], size_bytes=GB)
    executor = follower_read_executor(fake, LocalStateStore(), max_attempts)
    executor.ensure_cluster(fake.bootstrap_servers)
    return fake, executor, executor.start(Plan("c1", "rebalance", (PartitionMove("t", 0, (3, 2), (None, None)),)))
