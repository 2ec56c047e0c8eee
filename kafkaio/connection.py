"""One cluster's Kafka client lifecycle: the single kafka-python admin client, its security, its metadata cache.

Goal: one client per cluster, shared by every reader and writer Guardian runs against that cluster
(the collectors' bulk reads, :class:`kafkaio.source.KafkaSource`; the executor-facing port,
:class:`kafkaio.admin.KafkaAdmin`; the throttle levers), connected the way the operator configured
the cluster (:mod:`kafkaio.security`: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), so a cluster costs
one set of broker connections instead of one per consumer, and a refused login says so at once.

Method: :class:`KafkaConnection` lazily constructs the one ``KafkaAdminClient`` (this is the only
module that constructs one) with the security settings' client keyword arguments — secrets read
from their files / environment variables at that moment, never kept. Any failure of a call lets the
caller :meth:`~KafkaConnection.drop` the client; the next call connects again (controller failover,
dead bootstrap broker, rotated password file). kafka-python 3.0's connection manager retries a
refused SASL login until the bootstrap deadline (the error surfaces as a timeout); the manager used
here records a refused login or a failed TLS verification as a sticky failure of that broker and of
every bootstrap address, which kafka-python then raises at the next connection attempt, and the
failure becomes :class:`~kafkaio.errors.KafkaAuthError` naming the cluster, protocol, mechanism and
user. Its transports deliver the bytes that arrived together with the broker's close (kafka-python
3.0 drops them, so a refusal followed at once by the close read as a lost connection).

:class:`MetadataReader` reads all-topics Metadata through the same client's network layer (TLS and
SASL included) but keeps the response *undecoded*: the request's response hook hands back the raw
body bytes, and the reader decodes them (in the caller's thread, not the client's I/O thread) only
when they differ from the previous response's. A 100,000-partition cluster's Metadata is ~4 MB
and costs kafka-python most of a second to decode; between two rounds it is almost always the same.

Before each new client, one TCP connect per bootstrap address (:func:`kafkaio.reach.tcp_reach`, at most 2 s):
when none accepts, :class:`~kafkaio.errors.KafkaUnreachable` says why per address (refused, no answer, cannot
resolve) at once, instead of kafka-python's "Unable to bootstrap" after the whole bootstrap timeout.

Guarantee: exactly one ``KafkaAdminClient`` per :class:`KafkaConnection` at a time; callers on any
thread may share it (kafka-python runs all I/O on one thread and ``run`` is thread-safe). A wrong
password or an untrusted certificate raises :class:`~kafkaio.errors.KafkaAuthError` within one
connection attempt, not after the bootstrap timeout; no message names a secret.
Cost: connect = one bootstrap (ApiVersions, SASL handshake, Metadata); an unchanged Metadata
response costs its transfer and one ``bytes`` comparison.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import kafka.errors as kerrors
from kafka.admin import KafkaAdminClient
from kafka.net.compat import KafkaNetClient
from kafka.net.inet import create_connection
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector
from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from kafkaio.endpoints import ClusterEndpoints
from kafkaio.errors import KafkaAuthError, KafkaUnreachable
from kafkaio.reach import tcp_reach
from kafkaio.security import PLAINTEXT, SecurityError, SecuritySettings

log = logging.getLogger("guardian.kafkaio")

T = TypeVar("T")

_AUTH_ERRORS = (kerrors.SaslAuthenticationFailedError, kerrors.UnsupportedSaslMechanismError,
                kerrors.IllegalSaslStateError)
_TRANSIENT_TLS = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


def _auth_cause(exc: BaseException | None) -> BaseException | None:
    """The SASL refusal or TLS verification failure behind ``exc`` (None when it is something else)."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, _AUTH_ERRORS):
            return exc
        if isinstance(exc, ssl.SSLError) and not isinstance(exc, _TRANSIENT_TLS):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


class _DeliverBeforeEof:
    """Transport read loop that hands the protocol the bytes received together with the peer's close.

    kafka-python 3.0's loop reads until the socket would block, and when that read ends in EOF it
    aborts the transport *discarding what it read in the same call*. A broker answers a refused
    login with SaslAuthenticate error 58 and closes the connection; when both arrive before the
    client reads (a busy machine, TLS's close_notify right behind the record, a broker configured
    with ``connection.failed.authentication.delay.ms=0``) the answer was lost and the refusal
    looked like a dropped connection, retried with backoff until the bootstrap deadline. Here the
    bytes are delivered first, and the abort waits one loop turn so that the tasks they resolved
    (the SASL exchange failing the connection with the broker's error) run before it.
    """

    _closed: bool
    _read: bool
    _sock: Any
    _net: Any
    _protocol: Any
    last_read: float
    _sock_recv: Callable[[], tuple[bytes, Exception | None]]
    abort: Callable[..., None]

    async def _read_from_sock(self) -> None:
        while self._read and not self._closed:
            await self._net.wait_read(self._sock)
            data, err = self._sock_recv()
            if data:
                self.last_read = time.monotonic()
                proto = self._protocol
                if proto is not None:
                    if proto._sensors:
                        proto._sensors.bytes_received.record(len(data))
                    try:
                        proto.data_received(data)
                    except kerrors.KafkaProtocolError as exc:
                        return self.abort(error=exc)
            if err:
                if data:  # let the tasks the data woke (the SASL exchange) run before the connection is lost
                    await self._net.sleep(0)
                return self.abort(error=err)


class _TcpTransport(_DeliverBeforeEof, KafkaTCPTransport):
    """Plain TCP transport with :class:`_DeliverBeforeEof`'s read loop."""


class _SslTransport(_DeliverBeforeEof, KafkaSSLTransport):
    """TLS transport with :class:`_DeliverBeforeEof`'s read loop."""


class _GuardedManager(KafkaConnectionManager):
    """kafka-python's connection manager, recording a refused login as the cluster's sticky auth failure.

    kafka-python 3.0 records only failures raised while building the transport; a SASL refusal
    fails the connection's init future instead and is retried until the bootstrap deadline. Here a
    refusal by one broker is recorded for that broker and for every bootstrap address (credentials
    are the cluster's, not a broker's), so the bootstrap loop raises it at its next attempt instead
    of trying the other addresses with the same password; transports are built with
    :class:`_DeliverBeforeEof`'s read loop, so the broker's refusal is read even when its close
    arrives in the same read.
    """

    async def _build_transport(self, node: Any, timeout_at: Any = None) -> Any:
        sock = await create_connection(self._net, node.host, node.port, self.config["socket_options"],
                                       proxy_url=self.config["proxy_url"], timeout_at=timeout_at)
        transport: Any
        if self.ssl_enabled:
            ssl_configs = {k: v for k, v in self.config.items() if k.startswith("ssl_")}
            transport = _SslTransport(self._net, sock, host=node.host, **ssl_configs)
        else:
            transport = _TcpTransport(self._net, sock, host=node.host)
        try:
            await transport.handshake()
        except Exception as e:
            raise kerrors.KafkaConnectionError(f"Handshake failed: {e}") from e
        return transport

    def maybe_raise_auth_failure(self, node_id: Any) -> None:
        """Raise the recorded failure of ``node_id`` with a fresh traceback. kafka-python re-raises the one stored
        exception object, and every raise appends the raising frames to its traceback: a client whose login
        keeps failing grew it without bound, and each logged retry printed all of it (hundreds of MB a minute
        at DEBUG, enough CPU to time out every other client in the process)."""
        exc = self._auth_failures.get(node_id)
        if exc is not None:
            raise exc.with_traceback(None)

    async def _connect(self, node: Any, conn: Any, *args: Any, **kwargs: Any) -> None:
        await super()._connect(node, conn, *args, **kwargs)
        fut = conn.init_future
        if fut.is_done and fut.failed():
            cause = _auth_cause(fut.exception)
            if cause is not None:
                self._auth_failures[node.node_id] = fut.exception
                for boot in self.cluster.bootstrap_brokers():
                    self._auth_failures.setdefault(boot.node_id, fut.exception)


class _NetClientFactory:
    """``kafka_client`` for ``KafkaAdminClient``: a KafkaNetClient over :class:`_GuardedManager`."""

    def __init__(self) -> None:
        self.made: list[Any] = []

    def __call__(self, **configs: Any) -> Any:
        net = NetworkSelector(**configs)
        client = KafkaNetClient(net=net, manager=_GuardedManager(net, **configs), **configs)
        self.made.append(client)
        return client


# ---------------------------------------------------------------------- raw Metadata
class _RawBody:
    """A response left undecoded: the API version and the body bytes after the response header."""

    __slots__ = ("body", "version")
    throttle_time_ms = 0

    def __init__(self, version: int, body: bytes) -> None:
        self.version = version
        self.body = body

    def __repr__(self) -> str:
        return f"<undecoded response v{self.version}, {len(self.body)} bytes>"


class _RawResponseType:
    """Stands in for a response class in kafka-python's parser: parses the header, keeps the body."""

    def __init__(self, real: Any, version: int) -> None:
        self.real = real
        self.version = version

    def parse_header(self, data: Any) -> Any:
        return self.real.parse_header(data)

    def decode(self, data: Any) -> _RawBody:
        return _RawBody(self.version, bytes(data.read()))


class _RawHeader:
    """A request header whose response class is :class:`_RawResponseType` (everything else delegated)."""

    __slots__ = ("_h",)

    def __init__(self, header: Any) -> None:
        self._h = header

    @property
    def correlation_id(self) -> int:
        return int(self._h.correlation_id)

    def get_response_class(self) -> Any:
        real = self._h.get_response_class()
        return None if real is None else _RawResponseType(real, int(self._h.request_api_version))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._h, name)


class _RawMetadataRequest(MetadataRequest, init=False):  # type: ignore[call-arg]
    """All-topics Metadata whose response kafka-python hands back undecoded (:class:`_RawBody`)."""

    @property
    def header(self) -> Any:
        h = self._header
        return None if h is None else _RawHeader(h)


class MetadataReader:
    """All-topics Metadata through a connection's client, decoded only when the response bytes changed.

    Returns the previous decoded ``MetadataResponse`` object while the body is byte-for-byte equal
    (callers must not mutate it). ``decoded`` / ``reused`` count the two outcomes.
    """

    def __init__(self) -> None:
        self._last: tuple[bytes, Any] | None = None
        self.decoded = 0
        self.reused = 0

    def fetch(self, conn: KafkaConnection, timeout_ms: int) -> Any:
        """The decoded all-topics ``MetadataResponse`` (raises what the request raised)."""
        req = _RawMetadataRequest(topics=None, allow_auto_topic_creation=False,
                                  include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)
        resp = conn.send(req, timeout_ms=timeout_ms)
        if not isinstance(resp, _RawBody):  # the hook was bypassed: an already decoded response
            self.decoded += 1
            return resp
        last = self._last
        if last is not None and last[0] == resp.body:
            self.reused += 1
            return last[1]
        decoded = MetadataResponse[resp.version].decode(resp.body)
        self._last = (resp.body, decoded)
        self.decoded += 1
        return decoded


async def know_brokers(mgr: Any, nodes: Iterable[int], timeout_ms: int) -> None:
    """Refresh the client's broker list when it lacks one of ``nodes``.

    kafka-python refreshes its cluster metadata every 5 minutes (or after a failure it saw); a broker that
    (re)joined since — a restarted broker is fenced, dropped from the metadata, then registered again — is
    unknown to it until then, and every request to it fails client-side with ``UnknownBrokerIdError`` (the
    collectors' log dirs and group offsets of that broker for up to 5 minutes). One Metadata round trip,
    only in that case; a broker still unknown afterwards fails as before."""
    wanted = list(nodes)
    if all(mgr.cluster.broker_metadata(n) is not None for n in wanted):
        return
    with contextlib.suppress(Exception):  # the request that follows reports what is still wrong
        await mgr.wait_for(mgr.cluster.request_update(), timeout_ms)


# ---------------------------------------------------------------------- the connection
class KafkaConnection:
    """The one ``KafkaAdminClient`` of a cluster (created on first use, again after :meth:`drop`)."""

    def __init__(self, bootstrap_servers: str, *, cluster: str = "", security: SecuritySettings = PLAINTEXT,
                 client_id: str = "guardian", request_timeout_ms: int = 15_000,
                 bootstrap_timeout_ms: int | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.cluster = cluster
        self.security = security
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.bootstrap_timeout_ms = bootstrap_timeout_ms if bootstrap_timeout_ms is not None else request_timeout_ms
        self.metadata = MetadataReader()
        self.connects = 0
        """Clients constructed so far (1 while nothing failed)."""
        self.auth_failure: KafkaAuthError | None = None
        """The last refused login / TLS failure (None since the last successful connect)."""
        self._client: Any = None
        self._lock = threading.Lock()

    @classmethod
    def for_endpoints(cls, endpoints: ClusterEndpoints, **options: Any) -> KafkaConnection:
        """The connection of a cluster of an endpoints document (its bootstrap servers and security)."""
        return cls(endpoints.bootstrap_servers, cluster=endpoints.cluster, security=endpoints.security, **options)

    @property
    def name(self) -> str:
        """The cluster's name (its bootstrap servers when unnamed), for messages."""
        return self.cluster or self.bootstrap_servers

    def __repr__(self) -> str:
        state = "connected" if self._client is not None else "idle"
        return f"<KafkaConnection {self.name} {self.security.describe()} ({state})>"

    # ------------------------------------------------------------------ lifecycle
    def client(self) -> Any:
        """The client, connecting if needed; :class:`KafkaAuthError` when the login is refused.

        Other connection failures are raised as kafka-python raised them (the views wrap them).
        """
        with self._lock:
            if self._client is None:
                self._client = self._connect()
                self.connects += 1
                self.auth_failure = None
            return self._client

    def _connect(self) -> Any:
        try:
            kwargs = self.security.client_kwargs()
        except SecurityError as exc:
            self.auth_failure = KafkaAuthError(f"cluster {self.name}: cannot connect with "
                                               f"{self.security.describe()}: {exc}", self.name,
                                               self.security.describe())
            raise self.auth_failure from None
        unreachable = self._why_unreachable()
        if unreachable is not None:  # kafka-python would retry until its bootstrap timeout
            kwargs.clear()
            raise KafkaUnreachable(unreachable)
        factory = _NetClientFactory()
        try:
            return KafkaAdminClient(bootstrap_servers=self.bootstrap_servers, client_id=self.client_id,
                                    request_timeout_ms=self.request_timeout_ms,
                                    bootstrap_timeout_ms=self.bootstrap_timeout_ms,
                                    kafka_client=factory, **kwargs)
        except Exception as exc:
            for made in factory.made:  # a failed bootstrap leaves kafka-python's I/O thread running
                with contextlib.suppress(Exception):
                    made.close()
            auth = self.auth_error(exc)
            if auth is not None:
                raise auth from None
            raise
        finally:
            kwargs.clear()

    def _why_unreachable(self) -> str | None:
        """Why, when no bootstrap address even accepts a TCP connection (None when some does: a later failure
        is then Kafka's, not the network's). Asked before each new client: one TCP connect per address."""
        addresses = [a.strip() for a in self.bootstrap_servers.split(",") if a.strip()]
        reach = tcp_reach(addresses, timeout_s=min(2.0, self.bootstrap_timeout_ms / 1000))
        if not reach or any(why is None for why in reach.values()):
            return None
        return f"cluster {self.name}: no bootstrap server reachable: " + "; ".join(
            f"{a}: {why}" for a, why in reach.items())

    def drop(self, client: Any = None) -> None:
        """Close the client (only if it is still ``client``, when given); the next call reconnects."""
        with self._lock:
            current = self._client
            if current is None or (client is not None and client is not current):
                return
            self._client = None
        with contextlib.suppress(Exception):  # closing a broken client may fail again
            current.close()

    def close(self) -> None:
        """Close the client (idempotent; a later call connects again)."""
        self.drop()

    def auth_error(self, exc: BaseException) -> KafkaAuthError | None:
        """A :class:`KafkaAuthError` for ``exc`` when it is a refused login / TLS failure, else None.

        The error is also kept as :attr:`auth_failure` (until the next successful connect).
        """
        if isinstance(exc, KafkaAuthError):
            self.auth_failure = exc
            return exc
        cause = _auth_cause(exc)
        if cause is None:
            return None
        name = type(cause).__name__
        how = self.security.describe()
        if isinstance(cause, ssl.SSLError):
            why = (getattr(cause, "verify_message", None) or getattr(cause, "reason", None)
                   or (str(cause.args[-1]) if cause.args else name))
            self.auth_failure = KafkaAuthError(f"cluster {self.name}: TLS handshake failed with {how}: {why}",
                                               self.name, how)
            return self.auth_failure
        text = str(cause.args[0]) if cause.args else ""
        while text.startswith(f"{name}: "):  # kafka-python repeats the class name
            text = text[len(name) + 2:]
        self.auth_failure = KafkaAuthError(f"cluster {self.name}: authentication failed with {how}: {text or name}",
                                           self.name, how)
        return self.auth_failure

    # ------------------------------------------------------------------ requests
    def run(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        """Run coroutine ``fn(client)`` on the client's I/O loop and wait for it."""
        client = self.client()

        async def go() -> T:
            return await fn(client)

        result: T = client._manager.run(go)
        return result

    def send(self, request: Any, node_id: int | None = None, timeout_ms: int | None = None) -> Any:
        """One protocol request (to ``node_id``, else the least loaded broker); its response."""
        timeout = timeout_ms or self.request_timeout_ms

        async def go(client: Any) -> Any:
            mgr = client._manager
            if node_id is not None:
                await know_brokers(mgr, [node_id], timeout)
            return await mgr.wait_for(mgr.send(request, node_id=node_id, request_timeout_ms=timeout), timeout)

        return self.run(go)

    def send_all(self, requests: Mapping[int, Any], timeout_ms: int | None = None
                 ) -> tuple[dict[int, Any], dict[int, str]]:
        """One request per node, all in flight at once; ``(responses, errors)`` by node."""
        timeout = timeout_ms or self.request_timeout_ms

        async def go(client: Any) -> tuple[dict[int, Any], dict[int, str]]:
            mgr = client._manager
            await know_brokers(mgr, requests, timeout)
            futs = {}
            errs: dict[int, str] = {}
            for node, req in requests.items():
                try:
                    futs[node] = mgr.send(req, node_id=node, request_timeout_ms=timeout)
                except Exception as exc:
                    errs[node] = f"{type(exc).__name__}: {exc}"
            out: dict[int, Any] = {}
            for node, fut in futs.items():
                try:
                    out[node] = await mgr.wait_for(fut, timeout)
                except Exception as exc:
                    errs[node] = f"{type(exc).__name__}: {exc}"
            return out, errs

        return self.run(go)

    def read_metadata(self, timeout_ms: int | None = None) -> Any:
        """All-topics Metadata through :attr:`metadata` (decoded only when it changed)."""
        return self.metadata.fetch(self, timeout_ms or self.request_timeout_ms)
