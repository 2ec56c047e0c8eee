"""Concurrent scrapes of Prometheus endpoints: one HTTP GET per endpoint per round, with timeouts.

Goal: every metrics endpoint of a cluster (any number per broker: a JMX exporter, a node_exporter,
...) read once per round, over http or https, with basic or bearer auth, as fast as the endpoints
answer. Method: a :class:`Scraper` keeps one event loop and one ``aiohttp.ClientSession`` per CA file
across rounds, so each endpoint's HTTP/1.1 connection (and its TLS session) is kept alive from one
round to the next, as Prometheus does; https verifies the server against the endpoint's CA file
(else the system's CAs; the client is rebuilt when the file changes). A request that fails on a
kept connection the endpoint has closed meanwhile is sent once more on a fresh one. Credentials
are references (:class:`~kafkaio.endpoints.MetricsEndpoint`: ``password_file``,
``bearer_token_file``) read at the start of every round — each file once per round, so a rotated
secret is used from the next round on — and only ever placed in the request's ``Authorization``
header. Bodies are read up to 64 MiB and parsed as they arrive (parse time is measured per endpoint).

Guarantee: every endpoint gets its own deadline; a stalled, refusing, erroring, unauthorised or
garbage-serving endpoint (or one whose secret file is unreadable) yields a :class:`ScrapeResult`
with ``error`` set for that endpoint only and never delays the others beyond its timeout. No error
message, result or log line carries a secret (a file's path at most). Cost: one request per
endpoint per round, at most ``concurrency`` in flight and as many idle connections kept; a TCP and
TLS handshake only when an endpoint's connection was lost; one read per distinct secret file per round.
"""

from __future__ import annotations

import asyncio
import base64
import os
import ssl
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp

from collectors.promtext import Payload, PayloadError, check_payload, parse_fast
from collectors.scraped import RoundResult, ScrapeResult
from kafkaio.endpoints import MetricsEndpoint

MAX_BODY = 64 * 1024 * 1024
T = TypeVar("T")


class HttpFetchError(Exception):
    """An endpoint answered with something other than a usable 200 response."""


class SecretError(Exception):
    """A credential file of an endpoint cannot be read (the message names the file, never its content)."""


def _read_secret(path: str, cache: dict[str, str]) -> str:
    got = cache.get(path)
    if got is None:
        try:
            with open(path, encoding="utf-8") as f:
                got = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SecretError(f"cannot read {path}: {getattr(exc, 'strerror', None) or type(exc).__name__}") from None
        if not got:
            raise SecretError(f"{path} is empty")
        cache[path] = got
    return got


def authorization(ep: MetricsEndpoint, cache: dict[str, str] | None = None) -> str | None:
    """The ``Authorization`` header value of ``ep`` (basic or bearer, from its files), None without auth;
    :class:`SecretError` when a file cannot be read. ``cache`` shares each file's content within a round."""
    cache = {} if cache is None else cache
    if ep.username is not None and ep.password_file is not None:
        pw = _read_secret(ep.password_file, cache)
        return "Basic " + base64.b64encode(f"{ep.username}:{pw}".encode()).decode("ascii")
    if ep.bearer_token_file is not None:
        return "Bearer " + _read_secret(ep.bearer_token_file, cache)
    return None


Parser = Callable[[str], Payload]
Target = str | MetricsEndpoint
"""A URL, or an endpoint record with its CA and credential references."""

_HEADERS = {"Accept": "text/plain", "Accept-Encoding": "identity", "User-Agent": "guardian-collector"}
_STALE = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)
"""What a kept connection the endpoint closed meanwhile raises; the request is sent once more."""


def _endpoint(t: Target) -> MetricsEndpoint:
    ep = MetricsEndpoint(t) if isinstance(t, str) else t
    u = urlsplit(ep.url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise HttpFetchError(f"unsupported URL {ep.url!r} (http(s)://host:port/path expected)")
    return ep


class Scraper:
    """Scrapes endpoints round after round over kept-alive connections (see the module docstring).

    ``scrape`` may be called from any thread, one round at a time; ``close`` releases the connections."""

    def __init__(self, concurrency: int = 256, parser: Parser | None = None,
                 check: Callable[[Payload], None] = check_payload) -> None:
        self.concurrency = max(1, concurrency)
        self.parser = parser or parse_fast
        self.check = check
        """Raises :class:`PayloadError` on a parsed payload too broken to use (default: :func:`check_payload`)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._clients: dict[str | None, tuple[int, aiohttp.ClientSession]] = {}
        self._retired: list[aiohttp.ClientSession] = []  # replaced (CA file changed); closed at the next round
        self._lock = threading.Lock()

    def _client(self, ca_file: str | None) -> aiohttp.ClientSession:
        """The session verifying against ``ca_file`` (None: the system's CAs), rebuilt when the file changed."""
        stamp = os.stat(ca_file).st_mtime_ns if ca_file else 0
        got = self._clients.get(ca_file)
        if got is not None and got[0] == stamp:
            return got[1]
        if got is not None:
            self._retired.append(got[1])
        connector = aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=ca_file), limit=self.concurrency,
                                         limit_per_host=0, keepalive_timeout=60.0)
        client = aiohttp.ClientSession(connector=connector, headers=_HEADERS, trust_env=False,
                                       timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False)
        self._clients[ca_file] = (stamp, client)
        return client

    async def get(self, ep: MetricsEndpoint, auth: str | None = None) -> tuple[int, bytes]:
        """GET ``ep``'s URL on a kept connection and return ``(status, body)``; one retry on a connection
        the endpoint closed meanwhile; :class:`HttpFetchError` on a body over 64 MiB."""
        client = self._client(ep.ca_file if ep.url.startswith("https:") else None)
        headers = {"Authorization": auth} if auth is not None else None
        try:
            return await self._get_once(client, ep.url, headers)
        except _STALE:  # the endpoint closed the kept connection meanwhile: once more, on a fresh one
            return await self._get_once(client, ep.url, headers)

    @staticmethod
    async def _get_once(client: aiohttp.ClientSession, url: str,
                        headers: dict[str, str] | None) -> tuple[int, bytes]:
        async with client.get(url, headers=headers, allow_redirects=False) as resp:
            if resp.content_length is not None and resp.content_length > MAX_BODY:
                raise HttpFetchError("body larger than 64 MiB")
            parts: list[bytes] = []
            total = 0
            async for chunk in resp.content.iter_any():
                total += len(chunk)
                if total > MAX_BODY:
                    raise HttpFetchError("body larger than 64 MiB")
                parts.append(chunk)
            return resp.status, b"".join(parts)

    async def _scrape_one(self, target: Target, timeout_s: float, sem: asyncio.Semaphore,
                          secrets: dict[str, str]) -> ScrapeResult:
        res = ScrapeResult(target if isinstance(target, str) else target.url)
        async with sem:
            res.started = time.monotonic()
            try:
                ep = _endpoint(target)
                auth = authorization(ep, secrets)
            except SecretError as exc:
                res.received = res.started
                res.error = f"credentials: {exc}"
                return res
            except HttpFetchError as exc:
                res.received = res.started
                res.error = str(exc)
                return res
            try:
                status, body = await asyncio.wait_for(self.get(ep, auth), timeout_s)
                res.received = time.monotonic()
                res.status = status
                res.nbytes = len(body)
                if status != 200:
                    raise HttpFetchError(f"HTTP {status}: {body[:80].decode('utf-8', 'replace')!r}")
            except TimeoutError:
                res.received = time.monotonic()
                res.error = f"timed out after {timeout_s:g} s"
                return res
            except (OSError, HttpFetchError, aiohttp.ClientError, ValueError, ssl.SSLError) as exc:
                res.received = time.monotonic()
                res.error = f"{type(exc).__name__}: {exc}"
                return res
            finally:
                res.fetch_s = res.received - res.started
        t0 = time.perf_counter()
        try:
            payload = self.parser(body.decode("utf-8"))
            self.check(payload)
            res.payload = payload
        except UnicodeDecodeError:
            res.error = "payload is not UTF-8 text"
        except PayloadError as exc:
            res.error = str(exc)
        res.parse_s = time.perf_counter() - t0
        return res

    async def scrape_async(self, targets: Iterable[Target], timeout_s: float = 5.0) -> RoundResult:
        """Scrape every endpoint once, concurrently; one result per URL (run on this scraper's loop).

        A URL given twice is fetched once (the first target's CA and credentials). Only a host exporter shared
        by brokers on one host may be declared under two brokers (:func:`kafkaio.endpoints.check_shared_metrics_urls`
        refuses any other shared URL); the one result is then each of theirs (:mod:`collectors.build.topology`)."""
        sem = asyncio.Semaphore(self.concurrency)
        t0 = time.perf_counter()
        uniq: dict[str, Target] = {}
        for t in targets:
            uniq.setdefault(t if isinstance(t, str) else t.url, t)
        retired, self._retired = self._retired, []
        await _close_all(retired)
        secrets: dict[str, str] = {}  # each credential file read once this round, dropped with the round
        try:
            results = await asyncio.gather(*(self._scrape_one(t, timeout_s, sem, secrets) for t in uniq.values()))
        finally:
            secrets.clear()
        return RoundResult({r.url: r for r in results}, time.perf_counter() - t0)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this scraper's own event loop, kept between rounds with its connections.

        Not ``asyncio.run``: in the main thread it restores the SIGINT handler on exit, and CPython
        builds the repr of the finished main task for that (``%r is not a valid Handlers``) — the
        repr of a whole round of payloads, about a second of CPU at 1,000 brokers."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
            return self._loop.run_until_complete(coro)

    def scrape(self, targets: Iterable[Target], timeout_s: float = 5.0) -> RoundResult:
        """One round, blocking."""
        return self._run(self.scrape_async(targets, timeout_s))

    def fetch(self, target: Target, timeout_s: float = 10.0) -> tuple[int, bytes]:
        """GET one endpoint (its CA, its credentials) and return ``(status, body)``; raises on transport errors,
        :class:`SecretError` or :class:`HttpFetchError`."""
        ep = _endpoint(target)
        return self._run(asyncio.wait_for(self.get(ep, authorization(ep)), timeout_s))

    def close(self) -> None:
        """Close every kept connection and the event loop."""
        with self._lock:
            loop, self._loop = self._loop, None
            clients = [c for _, c in self._clients.values()] + self._retired
            self._clients, self._retired = {}, []
            if loop is None:
                return
            try:
                loop.run_until_complete(_close_all(clients))
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                loop.close()

    def __enter__(self) -> Scraper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


async def _close_all(clients: list[aiohttp.ClientSession]) -> None:
    await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def scrape_all(urls: Iterable[Target], timeout_s: float = 5.0, concurrency: int = 256,
               parser: Parser | None = None) -> RoundResult:
    """One round over fresh connections (a :class:`Scraper` used once); a collector keeps its own scraper."""
    with Scraper(concurrency, parser) as scraper:
        return scraper.scrape(urls, timeout_s)
