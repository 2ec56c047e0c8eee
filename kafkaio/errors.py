"""The errors of the Kafka edge, once: a failed admin call, a failed bulk read, a refused login.

Goal: callers tell "the cluster cannot be read right now" (retry next pass) from "Guardian's
credentials or trust settings are wrong" (an operator must act) without parsing messages.

Method: :class:`AdminError` (port calls) and :class:`KafkaSourceError` (bulk reads) as before;
:class:`KafkaAuthError` is both, so every existing ``except`` still catches it, and it names the
cluster, the security protocol and the SASL mechanism / user.

Guarantee: no message built here contains a secret (messages are built from settings records,
which hold only file and environment-variable references, and from broker error texts).
Cost: none.
"""

from __future__ import annotations


class AdminError(RuntimeError):
    """A cluster call failed (unreachable, timed out, or a top-level Kafka error)."""


class TopicExists(AdminError):
    """CreateTopics answered TOPIC_ALREADY_EXISTS: nothing was created."""


class KafkaSourceError(Exception):
    """Cluster metadata could not be read (the round has no topology)."""


class KafkaAuthError(AdminError, KafkaSourceError):
    """The cluster refused Guardian's credentials or TLS trust settings (SASL or TLS handshake failed).

    Retrying does not help; the message names the cluster, protocol and mechanism, never a secret.
    ``cluster`` and ``security`` (e.g. ``SASL_SSL/SCRAM-SHA-512 as user 'guardian'``) repeat them for
    callers that report them apart (the API's problem documents).
    """

    def __init__(self, message: str, cluster: str = "", security: str = "") -> None:
        super().__init__(message)
        self.cluster = cluster
        self.security = security


class KafkaUnreachable(AdminError, KafkaSourceError):
    """No bootstrap server of the cluster accepts a TCP connection (the message says why for each address:
    connection refused, no answer, cannot resolve)."""
