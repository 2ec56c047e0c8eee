"""Kafka record batches (magic v2, uncompressed) built with kafka-python, for tests that feed logs or fetch answers."""

from __future__ import annotations

from collections.abc import Sequence

from kafka.record.memory_records import MemoryRecordsBuilder


def record_batch(values: Sequence[bytes], first_offset: int = 0, timestamp_ms: int | Sequence[int] = 1_000) -> bytes:
    """One batch holding ``values`` from ``first_offset`` on; ``timestamp_ms`` for every record, or one per record."""
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, offset=first_offset)
    stamps = [timestamp_ms] * len(values) if isinstance(timestamp_ms, int) else list(timestamp_ms)
    for ts, v in zip(stamps, values, strict=True):
        b.append(ts, None, v)
    b.close()
    return bytes(b.buffer())
