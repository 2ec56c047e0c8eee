"""Stages 1-2 of a build: whose payload is whose, and which brokers exist.

Goal: one payload per broker — every endpoint of the broker (a JMX exporter, a node_exporter, any
number) merged — and the consumer-offset exporters' payloads, each with the clock its samples were
taken at; and the brokers the snapshot must describe. Method: an endpoint is a broker's when the
endpoints document lists it under that broker (a host exporter shared by brokers on one host, scraped once,
is each of theirs; any other URL shared by two brokers is refused when the document is read:
:func:`kafkaio.endpoints.check_shared_metrics_urls`); the payloads of a broker's endpoints that answered
are merged (:func:`~collectors.promtext.merge_payloads`: a family comes from the first endpoint that
has it and keeps that endpoint's clock). An endpoint's clock is the newest sample timestamp of its
payload when its samples carry one (the exposition format's optional timestamp: a source whose clock
is not the wall clock, such as a simulator running faster), else the moment its response arrived.
Known brokers = alive in the metadata ∪ ever declared ∪ ever seen alive ∪ named as a replica.
Guarantee: a failed endpoint is recorded for that endpoint only (``endpoints_failed``; the broker is
named in ``metrics_failed`` with the failed URLs, and its other endpoints are still used); an
endpoint no broker declares is never attributed by guessing (``metrics_failed_urls``).
Cost: O(endpoints + families + replicas).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from collectors.build.records import BrokerPayloads
from collectors.build.state import BrokerBook
from collectors.completeness import Coverage
from collectors.promtext import Payload, merge_payloads
from collectors.scraped import RoundResult, ScrapeResult
from kafkaio.types import KafkaState


@dataclass(frozen=True)
class Sources:
    """The round's usable payloads: per broker (merged), and of consumer-offset exporters."""

    brokers: BrokerPayloads
    exporters: list[tuple[Payload, float, str, str]]
    """(payload, clock, clock kind, url) of every exporter endpoint that answered."""


def clock_of(res: ScrapeResult, use_timestamps: bool) -> tuple[float, str]:
    """(clock, kind) of one endpoint's samples: the newest sample timestamp (``ts``) or the receive time (``mono``)."""
    p = res.payload
    if use_timestamps and p is not None and p.newest_ms is not None:
        return p.newest_ms / 1000.0, "ts"
    return res.received, "mono"


def map_payloads(scrape: RoundResult, book: BrokerBook, exporter_urls: Iterable[str], use_timestamps: bool,
                 cov: Coverage) -> Sources:
    """Merge each broker's endpoint payloads; attach exporters; failures go to ``cov``."""
    per_broker: dict[int, list[tuple[Payload, float, str]]] = {}
    failed: dict[int, list[str]] = {}
    exporter_payloads: list[tuple[Payload, float, str, str]] = []
    exporters = set(exporter_urls)
    for url, res in scrape.results.items():
        bids = book.url_brokers.get(url, ())
        if not res.ok or res.payload is None:
            err = res.error or "no payload"
            if bids:
                cov.endpoints_failed[url] = err
                for bid in bids:
                    failed.setdefault(bid, []).append(f"{url}: {err}")
            elif url in exporters:
                cov.exporters_failed[url] = err
            else:
                cov.metrics_failed_urls[url] = err
            continue
        clock, kind = clock_of(res, use_timestamps)
        if url in exporters:
            exporter_payloads.append((res.payload, clock, kind, url))
            continue
        if not bids:
            cov.metrics_failed_urls[url] = "no broker declares this endpoint"
            continue
        for bid in bids:  # several: a host exporter shared by the brokers on one host, scraped once
            per_broker.setdefault(bid, []).append((res.payload, clock, kind))
        cov.parse_seconds += res.parse_s
    for bid, msgs in failed.items():
        cov.metrics_failed[bid] = "; ".join(msgs)
    # results are in declared order (the scrape keeps it): the first endpoint of a broker wins a family
    payloads: BrokerPayloads = {bid: merge_payloads(parts) for bid, parts in per_broker.items()}
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
