"""Stages 1-2 of a build: whose payload is whose, and which brokers exist.

Goal: attach every scraped payload to its broker (or to a consumer-offset exporter) with the clock
its samples were taken at, and name the brokers the snapshot must describe. Method: an endpoint is
a broker's when the endpoints file says so, else when its ``kafkasim_broker_info`` sample does; a
sample's clock is ``kafkasim_sim_time_seconds`` when exposed and finite (simulated counters advance
in simulated time), else the moment its response arrived. Known brokers = alive in the metadata ∪
ever configured ∪ ever seen alive ∪ named as a replica. Guarantee: a failed or unattributable
endpoint is recorded in the coverage (``metrics_failed``, ``exporters_failed``,
``metrics_failed_urls``) and never guessed. Cost: O(endpoints + replicas).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from collectors.build.names import M_SIM_TIME
from collectors.build.records import BrokerPayloads
from collectors.build.state import BrokerBook
from collectors.completeness import Coverage
from collectors.promtext import Payload
from collectors.scrape import RoundResult
from kafkaio.source import KafkaState


@dataclass(frozen=True)
class Sources:
    """The round's usable payloads: per broker, and of consumer-offset exporters."""

    brokers: BrokerPayloads
    exporters: list[tuple[Payload, float, str, str]]
    """(payload, clock, clock kind, url) of every exporter endpoint that answered."""


def map_payloads(scrape: RoundResult, book: BrokerBook, exporter_urls: Iterable[str], use_sim_clock: bool,
                 cov: Coverage) -> Sources:
    """Attach each payload to its broker or exporter; failures go to ``cov``."""
    payloads: BrokerPayloads = {}
    exporter_payloads: list[tuple[Payload, float, str, str]] = []
    exporters = set(exporter_urls)
    for url, res in scrape.results.items():
        if not res.ok or res.payload is None:
            bid = book.url_broker.get(url)
            if bid is not None:
                cov.metrics_failed[bid] = res.error or "no payload"
            elif url in exporters:
                cov.exporters_failed[url] = res.error or "no payload"
            else:
                cov.metrics_failed_urls[url] = res.error or "no payload"
            continue
        p = res.payload
        sim = p.scalar(M_SIM_TIME) if use_sim_clock else None
        if sim is not None and math.isfinite(sim):
            clock, kind = sim, "sim"
        else:
            clock, kind = res.received, "mono"
        if url in exporters:
            exporter_payloads.append((p, clock, kind, url))
            continue
        bid = book.broker_of(url, p)
        if bid is None:
            cov.metrics_failed_urls[url] = "cannot tell which broker this endpoint belongs to"
            continue
        payloads[bid] = (p, clock, kind)
        cov.parse_seconds += res.parse_s
    return Sources(payloads, exporter_payloads)


def known_brokers(state: KafkaState, book: BrokerBook, cov: Coverage) -> tuple[set[int], set[int]]:
    """(alive, known) broker ids; remembers each alive broker's host, port and rack in ``book``."""
    alive = set(state.brokers)
    for bm in state.brokers.values():
        book.meta[bm.id] = (bm.host, bm.port, bm.rack)
    known: set[int] = set(alive) | set(book.brokers) | set(book.meta)
    for pm in state.partitions.values():
        known.update(pm.replicas)
    cov.brokers_total = sorted(known)
    cov.brokers_alive = sorted(alive)
    cov.controller = state.controller_id
    return alive, known
