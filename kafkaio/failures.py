"""What kind of failure a call against a cluster met, in one word.

Goal: the control plane counts and names each cluster's errors by kind (``guardian_cluster_errors_total
{cluster,kind}``, the API's ``last_error``) without parsing messages or knowing kafka-python's exception
classes: that knowledge stays at the Kafka edge.

Method: :func:`failure_kind` walks an exception and its causes (a few levels) and maps the first it
recognises: a refused login, a missing ACL (any of Kafka's ``*_AUTHORIZATION_FAILED``) or TLS trust ->
``auth``; a timeout of any layer -> ``timeout``; a refused
or lost connection, an unresolvable host -> ``unreachable``; failing that, the message's wording; else
``error``. Guarantee: total (every exception gets one of :data:`FAILURE_KINDS`' Kafka-side kinds).
Cost: O(causes).
"""

from __future__ import annotations

import socket
import ssl
from concurrent.futures import TimeoutError as FutureTimeout

import kafka.errors as kerrors

from kafkaio.errors import KafkaAuthError, KafkaUnreachable

FAILURE_KINDS = ("auth", "unreachable", "timeout", "error")

_AUTH = (KafkaAuthError, kerrors.SaslAuthenticationFailedError, kerrors.AuthorizationError,
         ssl.SSLCertVerificationError)
_TIMEOUT = (TimeoutError, socket.timeout, FutureTimeout, kerrors.KafkaTimeoutError, kerrors.RequestTimedOutError)
_UNREACHABLE = (ConnectionError, kerrors.KafkaConnectionError, socket.gaierror)


def failure_kind(exc: BaseException) -> str:
    """The kind of ``exc``: one of :data:`FAILURE_KINDS` (see the module docstring)."""
    cur: BaseException | None = exc
    for _ in range(6):
        if cur is None:
            break
        if isinstance(cur, _AUTH):
            return "auth"
        if isinstance(cur, KafkaUnreachable):
            return "unreachable"
        if isinstance(cur, _TIMEOUT):
            return "timeout"
        if isinstance(cur, _UNREACHABLE):
            return "unreachable"
        cur = cur.__cause__ or cur.__context__
    text = str(exc).lower()
    if "no bootstrap server reachable" in text:
        return "unreachable"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if any(w in text for w in ("connection refused", "no brokers", "unreachable", "not reachable",
                               "nodenotready", "node not ready", "connection error")):
        return "unreachable"
    return "error"
