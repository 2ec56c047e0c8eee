"""Which details a partial bulk read re-reads, and what it carries over from the previous read.

Goal: a collection round at 1,000 brokers cannot afford DescribeLogDirs and DescribeConfigs of every broker
each round; a partial round re-reads one slice plus whatever changed, and carries the rest over. The rule is
shared by the real bulk reader (:class:`kafkaio.source.KafkaSource`) and its fake
(:class:`kafkaio.fake_source.FakeBulkReader`), so the collectors' tests against the fake exercise the rule
production runs.

Method: :func:`details_to_read` compares the new metadata with the previous read's: brokers that gained replicas
(new partitions, changed replica sets), whose replicas went offline or came back (a failed log dir, KIP-112),
and the adding replicas of new reassignments have their log dirs re-read at once, on top of the caller's
``refresh_brokers``; broker configs of ``refresh_brokers``; topic configs of ``refresh_topics`` and new topics.
:func:`carry_over` copies every alive broker's last listing, read time, KIP-113 futures and configs, every live
topic's configs, and the errors of the details not re-read, into the new read.

Guarantee: a full read (or the first) reads every alive broker and topic; a partial read never drops a live
broker's listing it did not re-read (a broker whose re-read fails keeps its last listing and its age).
Cost: O(partitions) when the metadata changed since the previous read, O(reassignments) otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kafkaio.types import KafkaState


@dataclass(frozen=True)
class DetailsPlan:
    """What one bulk read asks besides metadata: log dirs of ``dir_brokers``, configs of ``cfg_brokers`` and
    ``topics``; ``full`` when every one is read (nothing carried over)."""

    dir_brokers: list[int]
    cfg_brokers: list[int]
    topics: list[str]
    full: bool


def details_to_read(state: KafkaState, previous: KafkaState | None, full: bool, refresh_brokers: Iterable[int] = (),
                    refresh_topics: Iterable[str] = ()) -> DetailsPlan:
    """The details ``state`` (metadata and reassignments read) still needs (see the module docstring)."""
    alive = sorted(state.brokers)
    if previous is None or full:
        return DetailsPlan(alive, alive, state.topics, True)
    want = set(refresh_brokers)
    new_topics = set()
    if state.partitions is not previous.partitions:
        for key, pm in state.partitions.items():
            old = previous.partitions.get(key)
            if old is None or old.replicas != pm.replicas:
                want.update(pm.replicas)  # new replicas: their log dirs must be read now
                if old is None:
                    new_topics.add(key[0])
            elif old.offline != pm.offline:  # a log dir failed (KIP-112): read its broker's dirs now
                want.update(set(old.offline) ^ set(pm.offline))
    for key, ra_ in state.reassignments.items():
        if key not in previous.reassignments:
            want.update(ra_.adding)
    alive_set = set(alive)
    return DetailsPlan(sorted(want & alive_set), sorted(set(refresh_brokers) & alive_set),
                       sorted((set(refresh_topics) | new_topics) & {t for t, _ in state.partitions}), False)


def carry_over(state: KafkaState, previous: KafkaState, plan: DetailsPlan) -> None:
    """Copy into ``state`` what a partial read does not re-read, from ``previous`` (``state.full`` becomes False)."""
    alive_set = set(state.brokers)
    state.full = False
    # carried over for alive brokers; a broker whose re-read fails keeps its last listing (and its age)
    state.log_dirs = {b: d for b, d in previous.log_dirs.items() if b in alive_set}
    state.log_dirs_at = {b: at for b, at in previous.log_dirs_at.items() if b in alive_set}
    state.futures_by_broker = {b: f for b, f in previous.futures_by_broker.items() if b in alive_set}
    state.broker_configs = {b: c for b, c in previous.broker_configs.items() if b in alive_set}
    live_topics = {t for t, _ in state.partitions}
    state.topic_configs = {t: c for t, c in previous.topic_configs.items() if t in live_topics}
    reread = {f" {b}" for b in plan.dir_brokers}
    state.errors.update({k: v for k, v in previous.errors.items()
                         if k.startswith(("describe_log_dirs broker", "describe_configs"))
                         and not any(k.endswith(b) for b in reread)})


def details_age(state: KafkaState) -> float:
    """Age of the oldest log-dir listing of an alive broker in ``state`` (0 for a full read)."""
    ages = [state.log_dirs_at[b] for b in state.brokers if b in state.log_dirs_at]
    return max(state.fetched_at - min(ages), 0.0) if ages and not state.full else 0.0
