"""Per-execution throttle settings: what ``guardian exec run`` takes as flags, recorded on a service execution.

Goal: an operator starting an execution through the API sets the same migration throttle as the CLI's
``exec run`` flags (``--throttle``, ``--util-threshold``, ``--floor``, ``--ceiling``, ``--initial``,
``--schedule``, ``--nic``, ``--follower-reads``); concurrency caps are the execution's ``caps`` (already
replicated). Method: the
settings are a plain JSON object stored in the replicated execution record (``options.throttle``), so a
new leader after a failover applies them as the old one did; :func:`throttle_settings` checks and
normalises the object (rates as bytes/s, the schedule kept as its text), :func:`policy_for` lays it over
the executor's configured :class:`~.migration_rate.MigrationRatePolicy` at the start of every pass.
Guarantee: a setting that :func:`throttle_settings` accepted always builds a valid policy; an unset key
keeps the executor's configured value. Cost: O(schedule windows) per pass.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from controlplane.executor.migration_rate import MigrationRatePolicy, Schedule, parse_rate

log = logging.getLogger("guardian.executor")
RATE_KEYS = ("floor", "ceiling", "initial", "fixed_rate", "nic_bytes_per_s")
"""Settings given in bytes/s (a number, or text such as ``"50MB"``)."""
KEYS = ("mode", "util_threshold", "schedule", "follower_reads", *RATE_KEYS)


class SettingsError(ValueError):
    """A throttle setting the executor cannot use; the message names the key."""


def _rate(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SettingsError(f"{key}: expected bytes/s (a number or e.g. '50MB'), got {value!r}")
    try:
        rate = parse_rate(value) if isinstance(value, str) else float(value)
    except ValueError as exc:
        raise SettingsError(f"{key}: {exc}") from None
    if not math.isfinite(rate) or rate <= 0:
        raise SettingsError(f"{key}: must be a positive finite rate, got {value!r}")
    return rate


def throttle_settings(doc: Mapping[str, Any], base: MigrationRatePolicy | None = None) -> dict[str, Any]:
    """The normalised settings (rates in bytes/s, ``schedule`` as text); :class:`SettingsError` naming the
    first bad key, or when the settings and ``base`` together make no valid policy (e.g. floor > ceiling)."""
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise SettingsError(f"{unknown[0]}: unknown throttle setting (known: {', '.join(KEYS)})")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if value is None:
            continue
        if key == "mode":
            if value not in ("adaptive", "fixed"):
                raise SettingsError(f"mode: must be adaptive or fixed, got {value!r}")
            out[key] = value
        elif key == "util_threshold":
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0.05 <= value <= 1.0:
                raise SettingsError(f"util_threshold: must be a number in [0.05, 1], got {value!r}")
            out[key] = float(value)
        elif key == "schedule":
            if not isinstance(value, str):
                raise SettingsError(f"schedule: expected text such as '22:00-06:00=200MB', got {value!r}")
            try:
                Schedule.parse(value)
            except ValueError as exc:
                raise SettingsError(f"schedule: {exc}") from None
            out[key] = value
        elif key == "follower_reads":
            if not isinstance(value, bool):
                raise SettingsError(f"follower_reads: expected true or false, got {value!r}")
            out[key] = value
        else:
            out[key] = _rate(key, value)
    try:
        policy_of(base or MigrationRatePolicy(), out)
    except ValueError as exc:
        raise SettingsError(f"throttle: {exc}") from None
    return out


def policy_of(base: MigrationRatePolicy, settings: Mapping[str, Any]) -> MigrationRatePolicy:
    """``base`` with ``settings`` (normalised by :func:`throttle_settings`) laid over it; ValueError if invalid."""
    changes: dict[str, Any] = {k: v for k, v in settings.items() if k in KEYS and k != "schedule"}
    if "schedule" in settings:
        changes["schedule"] = Schedule.parse(str(settings["schedule"]))
    return replace(base, **changes) if changes else base


def policy_for(base: MigrationRatePolicy, options: Mapping[str, Any]) -> MigrationRatePolicy:
    """The policy an execution runs under: ``base`` with its recorded ``options.throttle`` (a record that no
    longer builds a valid policy — never accepted by the API — is logged and ignored)."""
    settings = options.get("throttle")
    if not settings:
        return base
    try:
        return policy_of(base, settings)
    except (ValueError, TypeError) as exc:
        log.warning("execution throttle settings %r ignored: %s", settings, exc)
        return base
