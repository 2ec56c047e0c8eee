"""A metrics endpoint for scrape tests: kafkasim's HTTP server on a 127.0.0.1 port, in its own thread.

``bodies[path]`` answers GET ``path`` (404 otherwise); optional TLS and basic auth; counts the TCP
connections it accepted, so that a test sees whether a scraper kept its connection.
"""

from __future__ import annotations

import asyncio
import threading

from kafkasim.broker.httpd import BasicAuth, http_serve
from kafkasim.broker.tls import TlsMaterial


class MetricsServer:
    """Serves ``bodies`` (path -> body) on ``base``; ``url`` is ``base`` + ``/metrics``."""

    def __init__(self, tls: TlsMaterial | None = None, auth: BasicAuth | None = None,
                 bodies: dict[str, bytes] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.bodies: dict[str, bytes] = dict(bodies or {})
        self.connections = 0
        ready = threading.Event()

        async def conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1

            async def route(method: str, path: str, body: bytes) -> tuple[int, str, bytes]:
                got = self.bodies.get(path)
                return (200, "text/plain", got) if got is not None else (404, "text/plain", b"no such path")
            await http_serve(reader, writer, route, auth)

        async def start() -> None:
            ctx = tls.server_context() if tls is not None else None
            self.server = await asyncio.start_server(conn, "127.0.0.1", 0, ssl=ctx)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()

        self.thread = threading.Thread(target=lambda: (self.loop.run_until_complete(start()), self.loop.run_forever()),
                                       daemon=True)
        self.thread.start()
        if not ready.wait(10):
            raise RuntimeError("the metrics server did not start within 10 s")
        self.base = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.url = f"{self.base}/metrics"

    def drop_connections(self, listener_too: bool = False) -> None:
        """Close every kept connection (as an exporter restart or idle timeout does); and the listener."""
        async def stop() -> None:
            if listener_too:
                self.server.close()
            conns = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in conns:
                t.cancel()
            await asyncio.gather(*conns, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(5)

    def close(self) -> None:
        """Stop serving and end the thread."""
        self.drop_connections(listener_too=True)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
