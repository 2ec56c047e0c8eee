"""asyncio servers: one Kafka listener and one or two ``/metrics`` listeners per broker, a control
API, and the tick loop that advances the physics (optionally faster than real time).

Kafka listeners speak what :class:`~kafkasim.broker.security.SecurityConfig` says (PLAINTEXT by default;
SSL, SASL_PLAINTEXT, SASL_SSL).  Metrics follow :class:`~kafkasim.observe.exporters.MetricsConfig`: by
default realistic, a JMX exporter (closed while its broker is dead) and a node_exporter per broker,
stock names only, optionally https with basic auth; on request the legacy single endpoint
(:func:`kafkasim.observe.metrics.render_broker`).

Control API (JSON over HTTP on ``control_url``)::

    GET  /health                      {"ok": true}
    GET  /endpoints                   the endpoints document (see :meth:`SimServer.endpoints`)
    GET  /state                       sim time, ticks, achieved speed, broker liveness, disk util
    GET  /scrapes                     requests per metrics endpoint: {cluster: {broker: {kind: {"url",
                                      "requests", "unauthorized"}}}}
    GET  /snapshot?cluster=NAME       ground truth as a guardian.snapshot/v1 document
    GET  /reassignments?cluster=NAME[&since=SEQ]
                                      accepted AlterPartitionReassignments entries: {"cluster", "seq",
                                      "log": [{"seq", "sim_time", "topic", "partition", "replicas",
                                      "effect", "client_id", "broker"}] (seq > since), "counts":
                                      {"topic:partition": {"submitted", "cancelled", <effect>: n}}}
    GET  /groups?cluster=NAME         consumer groups (kafkasim.broker.groups): {"cluster", "sim_time", "groups":
                                      {id: {"kind": tail|lagging|real, "state", "coordinator", "members",
                                      "offsets": {"topic:partition": committed}, "lag": {... LEO - committed}}}}
    GET  /network                     leased lines (kafkasim.physics.network): capacity, demand, bytes/s by kind, util,
                                      latency, byte totals per line ({"idcs": [], "lines": []}; 404 without a network)
    GET  /gateway/IDC/metrics         node_exporter text of IDC's gateway host: node_network_{transmit,receive}_
                                      bytes_total, node_network_speed_bytes, node_network_up per device ll-<peer>
    POST /fault/kill-broker           {"cluster", "broker"}
    POST /fault/revive-broker         {"cluster", "broker", "configs"?}: with ``configs`` (read-only broker configs,
                                      e.g. replica.selector.class; null unsets) the restart reads an edited
                                      server.properties
    POST /fault/slow-disk             {"cluster", "broker", "log_dir" | "device", "factor"} (1 = heal)
    POST /fault/offline-log-dir       {"cluster", "broker", "log_dir"}: the JBOD disk fails (KIP-112): the dir's
                                      replicas go offline (DescribeLogDirs answers KAFKA_STORAGE_ERROR for it,
                                      Metadata lists them in offline_replicas), leadership moves to another
                                      in-sync replica, the broker runs on; with every dir offline it shuts down
    POST /fault/lagging-consumer      {"cluster", "topic", "partition"?, "lag_bytes", "rate_bytes_per_s"?}
    POST /fault/traffic-spike         {"cluster", "topic", "partition"?, "factor"} (1 = end the spike)
    POST /speed                       {"speed"}
    POST /advance                     {"seconds", "dt"?}  advance simulated time immediately

Errors are ``400 {"error": "..."}``; unknown paths ``404``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import ssl
import struct
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kafkasim.broker.httpd import BasicAuth, HttpError, Route, http_serve
from kafkasim.broker.protocol import Handler, fetch_audit
from kafkasim.broker.security import SaslGate, SecurityConfig
from kafkasim.broker.wire import (
    REGISTRY,
    SUPPORTED,
    ReqContext,
    api_versions_list,
    decode_request,
    encode_response,
    generic_error,
    minimal_error_frame,
    peek_header,
)
from kafkasim.cluster import model as m
from kafkasim.cluster.configs import BROKER_STATIC_KEYS, check_static_config
from kafkasim.cluster.model import Broker, Cluster
from kafkasim.observe.audit import AuditSink
from kafkasim.observe.exporters import MetricsConfig, render_jmx, render_node
from kafkasim.observe.metrics import render_broker
from kafkasim.observe.truth import LoadHistory, snapshot_of
from kafkasim.physics.network import render_gateway
from kafkasim.scenarios.realistic import hardware_profile, rack_to_idc
from kafkasim.scenarios.scenario import Federation

if TYPE_CHECKING:
    from kafkasim.tiering.tiered import TieredManager

FAILED_AUTH_CLOSE_DELAY_S = 0.1
"""Kafka's ``connection.failed.authentication.delay.ms`` default: the close follows a failed login by 100 ms."""
log = logging.getLogger("kafkasim")
MAX_FRAME = 100 * 1024 * 1024
_SASL_KEYS = (b"\x00\x11", b"\x00\x24")  # SaslHandshake (17), SaslAuthenticate (36): answered by the gate
_API_VERSIONS = b"\x00\x12"  # ApiVersions (18): answered before authentication too


class SimServer:
    """Runs a :class:`Federation` on 127.0.0.1: Kafka ports, metrics ports, control API, ticks."""

    def __init__(self, fed: Federation, host: str = "127.0.0.1", control_port: int = 0,
                 speed: float | None = None, tick_real_s: float = 0.1, audit_jsonl: str | None = None,
                 security: SecurityConfig | None = None, metrics: MetricsConfig | None = None,
                 tiered: TieredManager | None = None) -> None:
        self.fed = fed
        self.tiered = tiered  # tiered topics (KIP-405) with Guardian's metadata service; built by the caller
        self.security = security or SecurityConfig()
        self.metrics = metrics or MetricsConfig()
        self.host = host
        self.control_port = control_port
        self.speed = float(speed if speed is not None else fed.speed)
        self.tick_real_s = tick_real_s
        self.audit: AuditSink | None = None
        acfg = fed.audit or {}
        if acfg.get("enabled") or audit_jsonl:
            self.audit = AuditSink(fed, float(acfg.get("interval_s", 60)), str(acfg.get("topic", "__guardian_audit")),
                                   audit_jsonl or acfg.get("jsonl"), bool(acfg.get("synthetic", True)),
                                   client_idcs={str(k): str(v) for k, v in (acfg.get("client_idcs") or {}).items()})
        self.handler = Handler(self.audit.record_real if self.audit else None)
        if tiered is not None:
            self.handler.remote_read = tiered.read
        self.history = LoadHistory(fed.engine)
        self.kafka_servers: dict[int, asyncio.Server] = {}
        # (broker gidx, endpoint kind) -> listener / port / {"requests", "unauthorized"} counts
        self.metrics_servers: dict[tuple[int, str], asyncio.Server] = {}
        self.metrics_ports: dict[tuple[int, str], int] = {}
        self.scrapes: dict[tuple[int, str], dict[str, int]] = {}
        self.control: asyncio.Server | None = None
        self.conns: dict[int, set[asyncio.StreamWriter]] = {}
        self.http_conns: dict[tuple[int, str], set[asyncio.StreamWriter]] = {}  # kept metrics connections
        self.requests: dict[int, dict[str, int]] = {}
        # cluster -> (signature, frame) of the last all-topics Metadata response (see
        # Handler.metadata_signature): re-sent with a new correlation id while nothing changed
        self.metadata_frames: dict[str, tuple[Any, bytes]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.quota_state: dict[tuple[int, str, str], list[float]] = {}
        self._tick_task: asyncio.Task[None] | None = None
        self.running = False
        self.sim_advanced = 0.0
        self.real_elapsed = 0.0
        self.step_seconds = 0.0

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> dict[str, Any]:
        """Open every listener and start ticking; returns the endpoints document."""
        self.fed.engine.rebuild()
        self.fed.engine.step(1e-3)
        for cl in self.fed.clusters.values():
            for b in cl.brokers.values():
                await self._open_broker(cl, b)
                for kind in self.metrics.kinds:
                    await self._open_metrics(cl, b, kind)
        self.control = await asyncio.start_server(self._control_conn, self.host, self.control_port)
        self.control_port = self.control.sockets[0].getsockname()[1]
        self.running = True
        if self.tiered is not None:
            self.tiered.start()
        self._tick_task = asyncio.create_task(self._tick_loop())
        return self.endpoints()

    async def _open_metrics(self, cl: Cluster, b: Broker, kind: str) -> None:
        key = (b.gidx, kind)
        port = self.metrics_ports.get(key, b.metrics_port if kind in ("metrics", "jmx") else 0)
        ctx = self.metrics.tls.server_context() if self.metrics.tls is not None else None
        ms = await asyncio.start_server(functools.partial(self._metrics_conn, cl, b, kind), self.host, port or 0,
                                        ssl=ctx, ssl_handshake_timeout=10 if ctx else None)
        self.metrics_ports[key] = ms.sockets[0].getsockname()[1]
        if kind in ("metrics", "jmx"):
            b.metrics_port = self.metrics_ports[key]
        self.metrics_servers[key] = ms
        self.scrapes.setdefault(key, {"requests": 0, "unauthorized": 0})

    def metrics_urls(self, b: Broker) -> list[tuple[str, str]]:
        """(kind, URL) of every metrics endpoint of ``b``."""
        return [(kind, f"{self.metrics.scheme}://{self.host}:{self.metrics_ports[(b.gidx, kind)]}/metrics")
                for kind in self.metrics.kinds if (b.gidx, kind) in self.metrics_ports]

    async def _open_broker(self, cl: Cluster, b: Broker) -> None:
        ctx = self.security.server_context()
        srv = await asyncio.start_server(functools.partial(self._kafka_conn, cl, b),
                                         self.host, b.port or 0, ssl=ctx, ssl_handshake_timeout=10 if ctx else None)
        b.port = srv.sockets[0].getsockname()[1]
        b.host = self.host
        self.kafka_servers[b.gidx] = srv
        self.conns.setdefault(b.gidx, set())
        self.requests.setdefault(b.gidx, {})

    async def stop(self) -> None:
        """Close every listener and connection and stop ticking."""
        self.running = False
        if self._tick_task is not None:
            self._tick_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick_task
        if self.tiered is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.tiered.stop)
        for srv in [*self.kafka_servers.values(), *self.metrics_servers.values(),
                    *([self.control] if self.control else [])]:
            srv.close()
        for conns in self.conns.values():
            for w in list(conns):
                w.close()
        pending = [t for t in self.tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        for srv in [*self.kafka_servers.values(), *self.metrics_servers.values(),
                    *([self.control] if self.control else [])]:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(srv.wait_closed(), 2)

    def endpoints(self) -> dict[str, Any]:
        """Bootstrap servers, metrics URLs and the control URL of every cluster.

        Realistic metrics (the default): per broker only ``id``, its listener's ``host`` and ``port`` and
        ``metrics`` (a list of ``{"kind", "url"}``), and per cluster what an operator declares — the
        ``rack_to_idc`` rule and the ``hardware`` profile (see :mod:`kafkasim.scenarios.realistic`); IDC, rack and
        pool are not in it."""
        out: dict[str, Any] = {"format": "kafkasim.endpoints/v1",
                               "control_url": f"http://{self.host}:{self.control_port}", "clusters": {}}
        if self.fed.engine.network is not None:  # each IDC's gateway host (the leased lines' counters)
            out["gateways"] = {idc: f"http://{self.host}:{self.control_port}/gateway/"
                                    f"{urllib.parse.quote(idc, safe='')}/metrics"
                               for idc in self.fed.engine.network.idcs}
        for cl in self.fed.clusters.values():
            bs = sorted(cl.brokers.values(), key=lambda b: b.id)
            if self.metrics.realistic:
                out["clusters"][cl.name] = {
                    "bootstrap_servers": ",".join(f"{b.host}:{b.port}" for b in bs),
                    "partition_throttle": cl.partition_throttle,
                    "brokers": [{"id": b.id, "host": b.host, "port": b.port,
                                 "metrics": [{"kind": k, "url": u} for k, u in self.metrics_urls(b)]} for b in bs],
                    "rack_to_idc": rack_to_idc(self.fed, cl.name),
                    "hardware": hardware_profile(self.fed, cl.name)}
                continue
            out["clusters"][cl.name] = {
                "bootstrap_servers": ",".join(f"{b.host}:{b.port}" for b in bs),
                "metrics_urls": [f"http://{self.host}:{b.metrics_port}/metrics" for b in bs],
                "partition_throttle": cl.partition_throttle,
                "brokers": [{"id": b.id, "host": b.host, "port": b.port, "idc": b.idc, "rack": b.rack,
                             "pool": b.pool, "metrics_url": f"http://{self.host}:{b.metrics_port}/metrics"}
                            for b in bs],
            }
        return out

    # ------------------------------------------------------------------ ticking
    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        carry = 0.0
        eng = self.fed.engine
        while self.running:
            await asyncio.sleep(self.tick_real_s)
            now = loop.time()
            elapsed, last = now - last, now
            self.real_elapsed += elapsed
            carry += elapsed * self.speed
            max_dt = self.fed.tick_seconds
            steps = 0
            while carry > 1e-6 and steps < 50:
                dt = min(carry, max_dt)
                t0 = time.perf_counter()
                try:
                    eng.step(dt)
                except Exception:
                    log.exception("physics tick failed")
                self.step_seconds += time.perf_counter() - t0
                carry -= dt
                self.sim_advanced += dt
                steps += 1
                if carry > 1e-6:
                    await asyncio.sleep(0)
            carry = min(carry, max_dt * 50)

    # ------------------------------------------------------------------ kafka
    async def _kafka_conn(self, cl: Cluster, b: Broker, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        host = str(peer[0]) if peer else "?"
        conns = self.conns.setdefault(b.gidx, set())
        conns.add(writer)
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        gate = SaslGate(self.security) if self.security.uses_sasl else None
        try:
            while True:
                hdr = await reader.readexactly(4)
                size = struct.unpack(">i", hdr)[0]
                if size < 0 or size > MAX_FRAME or (size == 0 and not (gate and gate.raw_tokens)):
                    break
                frame = await reader.readexactly(size)
                close = False
                if gate is not None and (gate.raw_tokens or frame[:2] in _SASL_KEYS):
                    out, close = gate.answer(frame)
                elif gate is not None and not gate.authenticated and frame[:2] != _API_VERSIONS:
                    break  # a Kafka request before authentication: the broker closes the connection
                else:
                    out = await self._respond(cl, b, frame, host, gate)
                if out:
                    writer.write(out)
                    await writer.drain()
                if close:
                    # Kafka delays closing a connection whose login failed (connection.failed.authentication.
                    # delay.ms, default 100 ms), so the client reads the error before the close
                    await asyncio.sleep(FAILED_AUTH_CLOSE_DELAY_S)
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        except Exception:
            log.exception("connection to broker %s failed", b.id)
        finally:
            conns.discard(writer)
            if task is not None:
                self.tasks.discard(task)
            writer.close()

    async def _respond(self, cl: Cluster, b: Broker, frame: bytes, host: str,
                       gate: SaslGate | None = None) -> bytes | None:
        try:
            key, ver, cid = peek_header(frame)
        except ValueError:
            return None
        entry = REGISTRY.get(key)
        if entry is None or "response" not in entry:
            return minimal_error_frame(cid)
        resp_cls = entry["response"]
        if key == 18 and ver > SUPPORTED[18]:
            R = resp_cls
            keys = [R.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                    for k, lo, hi in api_versions_list(gate is not None)]
            return encode_response(R(version=0, error_code=m.UNSUPPORTED_VERSION, api_keys=keys), 0, cid)
        if ver > resp_cls.max_version or ver < 0:
            return minimal_error_frame(cid)
        try:
            header, req = decode_request(frame)
        except Exception:
            return encode_response(generic_error(key, ver, m.INVALID_REQUEST), ver, cid)
        name = str(entry["request"].name).removesuffix("Request")
        reqs = self.requests.setdefault(b.gidx, {})
        reqs[name] = reqs.get(name, 0) + 1
        ctx = ReqContext(header.client_id or "", host, cl, b, gate is not None,
                         (gate.principal or "ANONYMOUS") if gate is not None else "ANONYMOUS")
        t0 = time.perf_counter()
        if key == 1 and ver <= SUPPORTED[1]:
            deadline = time.monotonic() + min(max(req.max_wait_ms, 0), 30_000) / 1000.0
            while True:
                try:
                    resp, n = self.handler.fetch(ctx, ver, req)
                except Exception:
                    log.exception("fetch failed")
                    resp, n = generic_error(1, ver, m.UNKNOWN_SERVER_ERROR), 1
                if n > 0 or req.min_bytes <= 0 or time.monotonic() >= deadline or not b.alive:
                    break
                await asyncio.sleep(0.01)
            fetch_audit(self.handler, ctx, req, resp, (time.perf_counter() - t0) * 1000.0)
            delay = self._quota_delay(cl, b, ctx, "consumer_byte_rate", n)
        elif key == 3:
            sig = self.handler.metadata_signature(ctx, ver, req)
            cached = self.metadata_frames.get(cl.name)
            if sig is not None and cached is not None and cached[0] == sig:
                return cached[1][:4] + struct.pack(">i", cid) + cached[1][8:]
            resp = self.handler.handle(ctx, key, ver, req)
            if sig is not None and resp is not None:
                try:
                    frame = encode_response(resp, ver, cid)
                except Exception:
                    log.exception("encoding Metadata v%s failed", ver)
                    return encode_response(generic_error(key, ver, m.UNKNOWN_SERVER_ERROR), ver, cid)
                self.metadata_frames[cl.name] = (sig, frame)
                return frame
            delay = 0.0
        else:
            resp = self.handler.handle(ctx, key, ver, req)
            delay = 0.0
            if key == 0:
                nbytes = sum(len(pd.records or b"") for td in req.topic_data for pd in td.partition_data)
                delay = self._quota_delay(cl, b, ctx, "producer_byte_rate", nbytes)
        if delay > 0:
            # like a broker muting the channel: nothing more is read from this connection meanwhile
            await asyncio.sleep(delay)
            if resp is not None and hasattr(resp, "throttle_time_ms"):
                resp.throttle_time_ms = int(delay * 1000)
        if resp is None:
            return None
        try:
            return encode_response(resp, ver, cid)
        except Exception:
            log.exception("encoding %s v%s failed", name, ver)
            return encode_response(generic_error(key, ver, m.UNKNOWN_SERVER_ERROR), ver, cid)

    def _quota_delay(self, cl: Cluster, b: Broker, ctx: ReqContext, key: str, nbytes: int) -> float:
        """Seconds to hold a real client's response so its byte rate stays within its quota.

        Token bucket per (broker, client id, quota kind): one second of quota may burst; the debt
        beyond it drains at the quota rate.  The user is the SASL principal (``ANONYMOUS`` without SASL).
        """
        client_id = ctx.client_id
        q = cl.quota_for(ctx.principal, client_id, key)
        if not q < float("inf") or nbytes <= 0:
            return 0.0
        now = time.monotonic()
        st = self.quota_state.setdefault((b.gidx, client_id, key), [now, 0.0])
        st[1] = max(0.0, st[1] - (now - st[0]) * q) + nbytes
        st[0] = now
        return min(max(0.0, (st[1] - q) / q), 30.0)

    # ------------------------------------------------------------------ metrics
    async def _metrics_conn(self, cl: Cluster, b: Broker, kind: str, reader: asyncio.StreamReader,
                            writer: asyncio.StreamWriter) -> None:
        async def route(method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
            if path.split("?", 1)[0] != "/metrics":
                raise HttpError(404, "try /metrics")
            if kind == "node":
                text = render_node(cl, b, self.metrics.sim_series)
            elif not b.alive:
                raise HttpError(500, "broker is down")
            elif kind == "jmx":
                text = render_jmx(cl, b, self.requests.get(b.gidx), self.metrics.sim_series)
            else:
                text = render_broker(cl, b, self.requests.get(b.gidx))
            return 200, "text/plain; version=0.0.4; charset=utf-8", text.encode()

        counts = self.scrapes.setdefault((b.gidx, kind), {"requests": 0, "unauthorized": 0})

        def count(status: int) -> None:
            counts["requests"] += 1
            if status == 401:
                counts["unauthorized"] += 1

        await self._serve_http(reader, writer, route, self.metrics.auth, count, (b.gidx, kind))

    def scrape_counts(self) -> dict[str, Any]:
        """Requests served per metrics endpoint: {cluster: {broker id: {kind: {"url", "requests", "unauthorized"}}}}."""
        out: dict[str, Any] = {}
        for cl in self.fed.clusters.values():
            per = out.setdefault(cl.name, {})
            for b in sorted(cl.brokers.values(), key=lambda x: x.id):
                per[str(b.id)] = {k: {"url": u, **self.scrapes.get((b.gidx, k), {})} for k, u in self.metrics_urls(b)}
        return out

    # ------------------------------------------------------------------ faults
    async def kill_broker(self, cluster: str, broker_id: int) -> None:
        """Stop a broker: close its listener and connections; ISR and leadership move."""
        cl = self.fed.cluster(cluster)
        b = self._broker(cl, broker_id)
        if not b.alive:
            return
        cl.set_broker_alive(broker_id, False)
        srv = self.kafka_servers.pop(b.gidx, None)
        if srv is not None:
            srv.close()
        for w in list(self.conns.get(b.gidx, ())):
            w.close()
        jmx = self.metrics_servers.pop((b.gidx, "jmx"), None)  # the JMX exporter runs in the broker's JVM
        for w in list(self.http_conns.get((b.gidx, "jmx"), ())):
            w.close()
        for s in (srv, jmx):
            if s is not None:
                s.close()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(s.wait_closed(), 2)

    async def revive_broker(self, cluster: str, broker_id: int, configs: dict[str, Any] | None = None) -> None:
        """Restart a broker on its previous port; ``configs`` edit its server.properties first (read-only keys)."""
        cl = self.fed.cluster(cluster)
        b = self._broker(cl, broker_id)
        if configs:
            unknown = sorted(set(configs) - BROKER_STATIC_KEYS)
            if unknown:
                raise ValueError(f"unknown read-only broker config(s) {unknown}; known: {sorted(BROKER_STATIC_KEYS)}")
            if b.alive:
                raise ValueError(f"broker {b.id} is running: kill it first (a read-only config changes on restart)")
            for k, v in configs.items():
                if v is not None:
                    check_static_config(k, str(v))
            for k, v in configs.items():
                if v is None:
                    b.static_configs.pop(k, None)
                else:
                    b.static_configs[k] = str(v)
        if b.alive:
            return
        await self._open_broker(cl, b)
        if self.metrics.realistic:
            await self._open_metrics(cl, b, "jmx")
        cl.set_broker_alive(broker_id, True)

    @staticmethod
    def _broker(cl: Cluster, broker_id: Any) -> Broker:
        try:
            bid = int(broker_id)
        except (TypeError, ValueError) as e:
            raise ValueError(f"bad broker id {broker_id!r}") from e
        if bid not in cl.brokers:
            raise ValueError(f"unknown broker {bid} in cluster {cl.name}")
        return cl.brokers[bid]

    def slow_disk(self, cluster: str, broker_id: int, log_dir: str | None, factor: float,
                  device: str | None = None) -> None:
        """Make a disk ``factor``× slower (capacity / factor, latency × factor); 1 heals it."""
        cl = self.fed.cluster(cluster)
        b = self._broker(cl, broker_id)
        if not factor >= 1.0 or factor > 1e6:
            raise ValueError("factor must be in [1, 1e6]")
        disks = [d for d in b.disks if (log_dir and d.path == log_dir) or (device and d.device == device)]
        if not disks:
            raise ValueError(f"no log dir {log_dir or device!r} on broker {broker_id}")
        for d in disks:
            self.fed.engine.d_slow[d.gidx] = factor

    async def offline_log_dir(self, cluster: str, broker_id: Any, log_dir: str) -> int:
        """Fail a log dir (see ``POST /fault/offline-log-dir``); returns the replicas it held. Like Kafka's
        LogManager, a broker left with no online dir halts."""
        cl = self.fed.cluster(cluster)
        b = self._broker(cl, broker_id)
        if b.disk_by_path(log_dir) is None:
            raise ValueError(f"no log dir {log_dir!r} on broker {b.id}")
        hit = cl.set_log_dir_offline(b.id, log_dir)
        if all(d.offline for d in b.disks):
            await self.kill_broker(cluster, b.id)
        return len(hit)

    def _partitions(self, cluster: str, topic: str, partition: Any) -> tuple[Cluster, list[m.Partition]]:
        cl = self.fed.cluster(cluster)
        if topic not in cl.topics:
            raise ValueError(f"unknown topic {topic!r} in cluster {cluster}")
        parts = cl.topics[topic].partitions
        if partition is not None:
            pi = int(partition)
            if not 0 <= pi < len(parts):
                raise ValueError(f"unknown partition {topic}-{pi}")
            parts = [parts[pi]]
        return cl, parts

    def lagging_consumer(self, cluster: str, topic: str, partition: Any, lag_bytes: float,
                         rate: float = 50e6) -> None:
        """Give partitions a consumer ``lag_bytes`` behind that catches up at ``rate`` bytes/s."""
        if not (lag_bytes >= 0 and rate >= 0):
            raise ValueError("lag_bytes and rate must be >= 0")
        _, parts = self._partitions(cluster, topic, partition)
        eng = self.fed.engine
        for p in parts:
            eng.f["lag"][p.slot] = float(lag_bytes)
            eng.f["lag_rate"][p.slot] = float(rate)

    def traffic_spike(self, cluster: str, topic: str, partition: Any, factor: float) -> None:
        """Multiply the producers' rate of a topic (or one partition) by ``factor``."""
        if not (0 <= factor <= 1e4):
            raise ValueError("factor must be in [0, 1e4]")
        _, parts = self._partitions(cluster, topic, partition)
        for p in parts:
            self.fed.engine.f["spike"][p.slot] = float(factor)

    def state(self) -> dict[str, Any]:
        """A JSON-able summary of the simulation."""
        eng = self.fed.engine
        out: dict[str, Any] = {"sim_time": eng.t, "ticks": eng.ticks, "speed": self.speed,
                               "achieved_speed": self.sim_advanced / self.real_elapsed if self.real_elapsed else 0.0,
                               "clusters": {}}
        for cl in self.fed.clusters.values():
            out["clusters"][cl.name] = {
                "controller": cl.controller_id(),
                "topics": len(cl.topics),
                "reassignments": sum(1 for t in cl.topics.values() for p in t.partitions if p.reassignment),
                "brokers": {str(b.id): {"alive": b.alive, "idc": b.idc, "rack": b.rack, "disks": {
                    d.path: {"util": round(float(eng.d_util[d.gidx]), 4),
                             "await_ms": round(float(eng.d_await[d.gidx]), 3),
                             "used_bytes": int(eng.d_used[d.gidx]), "slow": float(eng.d_slow[d.gidx])}
                    for d in b.disks}} for b in sorted(cl.brokers.values(), key=lambda x: x.id)},
            }
        return out

    def reassignments(self, cluster: str, since: str = "0") -> dict[str, Any]:
        """The cluster's log of accepted reassignment entries after ``since`` and its per-partition counts."""
        if not cluster and len(self.fed.clusters) == 1:
            cluster = next(iter(self.fed.clusters))
        cl = self.fed.clusters.get(cluster)
        if cl is None:
            raise HttpError(400 if not cluster else 404, f"give ?cluster= one of {sorted(self.fed.clusters)}")
        try:
            after = int(since)
        except ValueError:
            raise HttpError(400, f"since must be an integer, got {since!r}") from None
        return {"cluster": cl.name, "seq": cl.reassignment_seq,
                "log": [dict(e) for e in cl.reassignment_log if e["seq"] > after],
                "counts": {k: dict(v) for k, v in sorted(cl.reassignment_counts.items())}}

    async def _control_conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def route(method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
            def ok(obj: Any) -> tuple[int, str, bytes]:
                return 200, "application/json", json.dumps(obj).encode()

            path, _, query = path.partition("?")
            params = dict(urllib.parse.parse_qsl(query))
            if method == "GET" and path == "/snapshot":
                name = params.get("cluster") or (next(iter(self.fed.clusters)) if len(self.fed.clusters) == 1 else "")
                if name not in self.fed.clusters:
                    raise HttpError(400 if not name else 404, f"give ?cluster= one of {sorted(self.fed.clusters)}")
                return ok(snapshot_of(self.fed, name, self.history))
            if method == "GET" and path == "/reassignments":
                return ok(self.reassignments(params.get("cluster", ""), params.get("since", "0")))
            if method == "GET" and path == "/groups":
                name = params.get("cluster") or (next(iter(self.fed.clusters)) if len(self.fed.clusters) == 1 else "")
                if name not in self.fed.clusters:
                    raise HttpError(400 if not name else 404, f"give ?cluster= one of {sorted(self.fed.clusters)}")
                return ok(self.handler.groups.report(self.fed.clusters[name]))
            if method == "GET":
                if path == "/health":
                    return ok({"ok": True})
                if path == "/endpoints":
                    return ok(self.endpoints())
                if path == "/state":
                    return ok(self.state())
                if path == "/scrapes":
                    return ok(self.scrape_counts())
                net = self.fed.engine.network
                if path == "/network" and net is not None:
                    return ok(net.report())
                if path.startswith("/gateway/") and path.endswith("/metrics") and net is not None:
                    idc = urllib.parse.unquote(path[len("/gateway/"):-len("/metrics")])
                    if idc not in net.idcs:
                        raise HttpError(404, f"unknown IDC {idc!r}; known: {net.idcs}")
                    return 200, "text/plain; version=0.0.4", render_gateway(net, idc, self.fed.engine.t).encode()
                raise HttpError(404, f"unknown path {path}")
            if method != "POST":
                raise HttpError(405, "use GET or POST")
            try:
                args = json.loads(body or b"{}")
                if not isinstance(args, dict):
                    raise ValueError("body must be a JSON object")
                if path == "/fault/kill-broker":
                    await self.kill_broker(str(args["cluster"]), args["broker"])
                elif path == "/fault/revive-broker":
                    await self.revive_broker(str(args["cluster"]), args["broker"], args.get("configs"))
                elif path == "/fault/slow-disk":
                    self.slow_disk(str(args["cluster"]), args["broker"], args.get("log_dir"),
                                   float(args.get("factor", 10.0)), args.get("device"))
                elif path == "/fault/offline-log-dir":
                    await self.offline_log_dir(str(args["cluster"]), args["broker"], str(args["log_dir"]))
                elif path == "/fault/lagging-consumer":
                    self.lagging_consumer(str(args["cluster"]), str(args["topic"]), args.get("partition"),
                                          float(args.get("lag_bytes", 50e9)), float(args.get("rate_bytes_per_s", 50e6)))
                elif path == "/fault/traffic-spike":
                    self.traffic_spike(str(args["cluster"]), str(args["topic"]), args.get("partition"),
                                       float(args.get("factor", 5.0)))
                elif path == "/speed":
                    sp = float(args["speed"])
                    if not 0 < sp <= 1e6:
                        raise ValueError("speed must be in (0, 1e6]")
                    self.speed = sp
                elif path == "/advance":
                    secs = float(args["seconds"])
                    dt = float(args.get("dt", self.fed.tick_seconds))
                    if not (0 <= secs <= 1e7 and dt > 0 and secs / dt <= 100_000):
                        raise ValueError("seconds must be in [0, 1e7], dt > 0, and at most 100000 ticks")
                    self.fed.engine.advance(secs, dt)
                else:
                    raise HttpError(404, f"unknown path {path}")
            except HttpError:
                raise
            except KeyError as e:
                raise HttpError(400, f"missing or unknown {e}") from e
            except (ValueError, TypeError, json.JSONDecodeError) as e:
                raise HttpError(400, str(e)) from e
            return ok({"ok": True, "sim_time": self.fed.engine.t})

        await self._serve_http(reader, writer, route)

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, route: Route,
                          auth: BasicAuth | None = None, on_status: Callable[[int], None] | None = None,
                          endpoint: tuple[int, str] | None = None) -> None:
        """Serve one kept-alive HTTP connection, tracked so that :meth:`stop` (and, for an endpoint of a
        broker's process, :meth:`kill_broker`) closes it."""
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        conns = self.http_conns.setdefault(endpoint, set()) if endpoint is not None else None
        if conns is not None:
            conns.add(writer)
        try:
            await http_serve(reader, writer, route, auth, on_status)
        finally:
            if conns is not None:
                conns.discard(writer)
            if task is not None:
                self.tasks.discard(task)


class SimRunner:
    """Runs a :class:`SimServer` on its own event loop in a background thread (for tests, embedding)."""

    def __init__(self, fed: Federation, **kw: Any) -> None:
        self.server = SimServer(fed, **kw)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="kafkasim", daemon=True)
        self.endpoints: dict[str, Any] = {}

    def start(self) -> dict[str, Any]:
        """Start the loop thread and the server; returns the endpoints document."""
        self.thread.start()
        self.endpoints = asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(30)
        return self.endpoints

    def call(self, fn: Callable[[], Any], timeout: float = 30) -> Any:
        """Run ``fn`` on the loop thread (safe access to the federation) and return its result."""
        async def wrap() -> Any:
            r = fn()
            if asyncio.iscoroutine(r):
                r = await r
            return r

        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(timeout)

    def stop(self) -> None:
        """Stop the server and the loop thread."""
        if not self.thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        if not self.thread.is_alive():
            self.loop.close()
