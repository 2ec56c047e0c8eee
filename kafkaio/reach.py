"""Can a TCP connection to a ``host:port`` be opened at all? The cheapest question to ask of a cluster.

Goal: name why a cluster cannot be reached — "connection refused" (nothing listens: a closed port, a wrong
address), "no answer" (packets dropped: a firewall, a dead host), "cannot resolve" — instead of kafka-python's
one "Unable to bootstrap" after its whole bootstrap timeout; and let registration check a bootstrap address
and a metrics endpoint once before accepting them.

Method: :func:`parse_address` reads ``host:port`` (``[v6]:port`` too) and refuses anything else, naming the
problem; :func:`tcp_reach` opens and closes one TCP connection per address, all at once, each with its own
timeout. Guarantee: returns within ``timeout_s`` (plus thread start) whatever the addresses do; never raises
for an unreachable address (the reason is the value). Cost: one connect per address.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor


class AddressError(ValueError):
    """Not a ``host:port`` address."""


def parse_address(text: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` or ``[v6]:port``; :class:`AddressError` naming what is wrong."""
    value = text.strip()
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        raise AddressError(f"{text!r} is not host:port (no port)")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise AddressError(f"{text!r} is not host:port (an IPv6 host goes in brackets: [::1]:9092)")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise AddressError(f"{text!r} is not host:port (port {port!r} is not a number from 1 to 65535)")
    if not host or any(c.isspace() for c in host) or "/" in host:
        raise AddressError(f"{text!r} is not host:port (bad host {host!r})")
    return host, int(port)


def tcp_reach(addresses: list[str], timeout_s: float = 2.0) -> dict[str, str | None]:
    """Per address: None when a TCP connection opened, else why not ("connection refused", "no answer
    within 2 s", "cannot resolve host ...")."""
    def one(address: str) -> str | None:
        try:
            host, port = parse_address(address)
        except AddressError as exc:
            return str(exc)
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                return None
        except socket.gaierror as exc:
            return f"cannot resolve host {host!r} ({exc.strerror or exc})"
        except TimeoutError:
            return f"no answer within {timeout_s:g} s (packets dropped?)"
        except ConnectionRefusedError:
            return "connection refused (nothing listens there)"
        except OSError as exc:
            return exc.strerror or str(exc)

    if not addresses:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(addresses)), thread_name_prefix="reach") as pool:
        return dict(zip(addresses, pool.map(one, addresses), strict=True))
