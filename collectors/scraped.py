"""The records of a scrape round: what each metrics endpoint returned, and the round as a whole.

Goal: the collectors' pure stages (:mod:`collectors.builder`, :mod:`collectors.build`) read a scrape round
without importing the HTTP client that produced it (:mod:`collectors.scrape`), so they are tested with rounds
built in memory.

Method: plain dataclasses; :class:`ScrapeResult` holds one endpoint's parsed payload or its error and timings,
:class:`RoundResult` every endpoint of one round by URL.

Guarantee: no secret, socket or session is held (an error names a file at most).
Cost: one small object per endpoint per round.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from collectors.promtext import Payload


@dataclass
class ScrapeResult:
    """What one endpoint returned in one round."""

    url: str
    payload: Payload | None = None
    error: str | None = None
    status: int = 0
    nbytes: int = 0
    started: float = 0.0  # time.monotonic() when the request started
    received: float = 0.0  # time.monotonic() when the body was complete
    fetch_s: float = 0.0
    parse_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when a usable payload was parsed."""
        return self.payload is not None and self.error is None


@dataclass
class RoundResult:
    """All endpoints of one round."""

    results: dict[str, ScrapeResult] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def failed(self) -> dict[str, str]:
        """url -> error for the endpoints that gave no usable payload."""
        return {u: r.error or "no payload" for u, r in self.results.items() if not r.ok}
