"""domain.throttles: the lever vocabulary, the ownership rule and the one merge rule of the two owners."""

from __future__ import annotations

import json

import pytest

from domain.throttles import (
    ALTER_DIRS_RATE,
    FOLLOWER_RATE,
    LEVER_KINDS,
    MIGRATION_CEILINGS,
    TARGET_FIELDS,
    Lever,
    LeverKind,
    Owner,
    lever_owner,
    migration_rate,
)


def test_lever_kinds_are_the_stored_strings() -> None:
    assert [str(k) for k in LEVER_KINDS] == ["partition_fetch", "partition_produce", "consumer_quota",
                                            "producer_quota", "follower_replication", "migration_rate",
                                            "intra_broker_rate"]
    assert json.dumps({"kind": LeverKind.MIGRATION}) == '{"kind": "migration_rate"}'
    assert {"migration_rate": 1}[LeverKind.MIGRATION] == 1  # a stored kind finds the enum's entries and back


def test_a_lever_is_frozen_and_knows_its_kind() -> None:
    lever = Lever.of("consumer_quota", {"client_id": "billing"}, 1e6)
    assert lever == Lever(LeverKind.CONSUMER_QUOTA, {"client_id": "billing"}, 1e6)
    with pytest.raises(AttributeError):
        lever.rate = 2.0  # type: ignore[misc]
    with pytest.raises(ValueError):
        Lever.of("migration.broker", {"broker": 1})  # the executor's own records are not levers


def test_every_lever_kind_names_the_target_it_needs() -> None:
    assert set(TARGET_FIELDS) == set(LeverKind) and all(TARGET_FIELDS.values())
    assert TARGET_FIELDS[LeverKind.MIGRATION] == ("broker",)


def test_the_executor_owns_only_the_migration_rates_and_only_while_it_runs() -> None:
    assert MIGRATION_CEILINGS == {LeverKind.MIGRATION: FOLLOWER_RATE, LeverKind.INTRA_BROKER: ALTER_DIRS_RATE}
    for kind in LeverKind:
        assert lever_owner(kind, execution_running=False) is Owner.PROTECTION
        running = lever_owner(str(kind), execution_running=True)
        assert running is (Owner.EXECUTOR if kind in MIGRATION_CEILINGS else Owner.PROTECTION), kind


def test_protection_is_a_ceiling_the_migration_runs_under_but_never_below_its_floor() -> None:
    assert migration_rate(50e6, None) == 50e6  # no protection: the executor's rate
    assert migration_rate(50e6, 20e6) == 20e6  # protection caps it
    assert migration_rate(10e6, 20e6) == 10e6  # a ceiling never raises it
    assert migration_rate(50e6, 5e6, floor=8e6) == 8e6  # ... nor pushes it below what the copies need to finish
    assert migration_rate(3e6, 5e6, floor=8e6) == 8e6  # the result is never below the floor
