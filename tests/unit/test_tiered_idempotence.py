"""Idempotent tiered appends (producer id + sequence per partition) in the rules, the store and the state
machine — a retry answered with the first answer and nothing written, through a snapshot attachment and a
reopen of the store — and the ``[tiered]`` TLS settings (secure by default off loopback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.bootstrap import tiered_tls
from controlplane.config import Settings, TieredConf
from raft.errors import StartupRefused
from raft.protocol import CommandRejected
from raft.storage import SnapshotCodec
from tiered.machine import STALE_SEQUENCE_PREFIX, TieredStateMachine, append_command, delete_command, validate
from tiered.model import (
    MAX_PRODUCERS_PER_PARTITION,
    EventKind,
    GroupRefused,
    PartitionKey,
    ProducerState,
    SegmentEvent,
    check_sequence,
    request_digest,
)
from tiered.store import TieredStore

K = PartitionKey("c1", "topic", 3)
P = 77


def started(start: int) -> list[SegmentEvent]:
    return [SegmentEvent(EventKind.COPY_STARTED, 0, start, start + 99, 1, 100, f"/r/{start}")]


def test_check_sequence_rules() -> None:
    d = request_digest(1, started(0))
    assert d == request_digest(1, started(0)) and d != request_digest(2, started(0)) != request_digest(1, started(5))
    last = ProducerState(5, d, 9, (3, 4), 40)
    assert check_sequence(None, P, 1, d) is None
    assert check_sequence(last, P, 6, "other") is None  # new: any higher sequence (a refused one leaves a gap)
    assert check_sequence(last, P, 5, d) == last  # a retry: the first answer
    with pytest.raises(GroupRefused, match="different group"):
        check_sequence(last, P, 5, "other")
    with pytest.raises(GroupRefused) as older:
        check_sequence(last, P, 4, d)
    assert older.value.stale_sequence and not older.value.stale_epoch
    with pytest.raises(GroupRefused):
        check_sequence(None, P, 0, d)


def test_a_retried_command_is_applied_once_and_answered_with_the_first_answer(tmp_path: Path) -> None:
    store = TieredStore(tmp_path / "s")
    sm = TieredStateMachine(store)
    first = sm.apply_at(append_command(K, 1, started(0), P, 1), 10)
    assert first == {"group_id": 1, "segment_ids": [1], "duplicate": False, "raft_index": 10}
    before = store.digest()
    # the same command committed again (a client retry after a lost answer): nothing written but the watermark
    again = sm.apply_at(append_command(K, 1, started(0), P, 1), 11)
    assert again == {"group_id": 1, "segment_ids": [1], "duplicate": True, "raft_index": 10}
    assert store.digest() == before and store.watermark() == 11
    meta, segs = store.current_state(K)
    assert meta is not None and meta.groups == 1 and len(segs) == 1
    # another producer, or no producer, is not deduplicated against it
    assert sm.apply_at(append_command(K, 1, started(0), P + 1, 1), 12)["group_id"] == 2
    assert sm.apply_at(append_command(K, 1, started(0)), 13) == {"group_id": 3, "segment_ids": [3]}
    # the next sequence applies; an older one is refused (stale-sequence), a reused one with other content too
    assert sm.apply_at(append_command(K, 1, started(100), P, 2), 14)["group_id"] == 4
    with pytest.raises(CommandRejected) as old:
        sm.apply_at(append_command(K, 1, started(0), P, 1), 15)
    assert str(old.value).startswith(STALE_SEQUENCE_PREFIX)
    with pytest.raises(CommandRejected, match="different group"):
        sm.apply_at(append_command(K, 1, started(999), P, 2), 16)
    assert store.watermark() == 16 and store.current_state(K)[0].groups == 4  # type: ignore[union-attr]
    # a retry is answered even after the partition's epoch moved on (it was applied under its own epoch)
    sm.apply_at(append_command(K, 5, started(200), P + 2, 1), 17)
    assert sm.apply_at(append_command(K, 1, started(100), P, 2), 18)["duplicate"] is True
    # per partition: the same producer and sequence on another partition is new
    other = PartitionKey("c1", "topic", 4)
    assert sm.apply_at(append_command(other, 1, started(0), P, 1), 19)["duplicate"] is False
    sm.apply_at(delete_command(K), 20)
    assert store.producer(K, P) is None and store.producer(other, P) is not None
    store.close()


def test_shape_checks_of_idempotent_commands() -> None:
    validate(append_command(K, 1, started(0), P, 1))
    for pid, seq in ((P, 0), (0, 1), (2**64, 1)):
        with pytest.raises(CommandRejected):
            validate({**append_command(K, 1, started(0)), "producer_id": pid, "sequence": seq})


def test_producer_state_survives_a_snapshot_attachment_and_a_reopen(tmp_path: Path) -> None:
    leader = TieredStateMachine(TieredStore(tmp_path / "a"))
    for i in range(1, 30):
        leader.apply_at(append_command(K, 1, started(100 * i), P, i), i)
    follower = TieredStateMachine(TieredStore(tmp_path / "b"))
    codec = SnapshotCodec(leader.snapshot, lambda s, p: None, attach=leader.write_attachment)
    codec.serialize(str(tmp_path / "snap.bin"), ((b"", 29, 1), None, {}))

    def install(state: dict, path: Path | None) -> None:
        assert path is not None
        follower.restore_attachment(state, path)

    SnapshotCodec(follower.snapshot, install).deserialize(str(tmp_path / "snap.bin"))
    assert follower.store.digest() == leader.store.digest()
    # the installed node answers the last request's retry (e.g. after a failover to it) without applying it
    retry = follower.apply_at(append_command(K, 1, started(2900), P, 29), 30)
    assert retry["duplicate"] and retry["group_id"] == 29
    follower.store.close()
    reopened = TieredStateMachine(TieredStore(tmp_path / "b"))  # a restart: the store is on disk
    assert reopened.apply_at(append_command(K, 1, started(2900), P, 29), 31)["duplicate"]
    assert reopened.store.current_state(K)[0].groups == 29  # type: ignore[union-attr]
    reopened.store.close()
    leader.store.close()


def test_producers_per_partition_are_capped_least_recent_first(tmp_path: Path) -> None:
    store = TieredStore(tmp_path / "s")
    sm = TieredStateMachine(store)
    n = MAX_PRODUCERS_PER_PARTITION
    for p in range(1, n + 1):
        sm.apply_at(append_command(K, 1, started(100 * p), p, 1), p)
    sm.apply_at(append_command(K, 1, started(0), 1, 2), n + 1)  # producer 1 is now the most recent
    sm.apply_at(append_command(K, 1, started(10**6), 999, 1), n + 2)  # one too many: producer 2 is forgotten
    assert store.producer(K, 2) is None and store.producer(K, 1) is not None and store.producer(K, 999) is not None
    assert sum(store.producer(K, p) is not None for p in (*range(1, n + 1), 999)) == n
    store.close()


def test_tiered_tls_settings_are_secure_by_default(tmp_path: Path) -> None:
    TieredConf(enabled=True)  # loopback without TLS: fine
    with pytest.raises(ValueError, match="not loopback"):
        TieredConf(enabled=True, host="0.0.0.0")
    TieredConf(enabled=True, host="0.0.0.0", allow_plaintext=True)
    TieredConf(enabled=False, host="0.0.0.0")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    assert TieredConf(enabled=True, host="10.0.0.1", tls_cert_file=cert, tls_key_file=key).tls
    with pytest.raises(ValueError, match="together"):
        TieredConf(tls_cert_file=cert)
    with pytest.raises(ValueError, match="needs"):
        TieredConf(tls_client_ca_file=cert)
    settings = Settings(tiered=TieredConf(enabled=True, tls_cert_file=cert, tls_key_file=key))
    with pytest.raises(StartupRefused, match=r"tiered\.tls_cert_file"):
        tiered_tls(settings)
    cert.write_text("not a certificate")
    key.write_text("not a key")
    with pytest.raises(StartupRefused, match="not a certificate"):
        tiered_tls(settings)
    assert tiered_tls(Settings()) is None
