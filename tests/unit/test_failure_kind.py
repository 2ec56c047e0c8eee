"""failure_kind names the kind of a failure against a cluster: what only an operator can end (``auth``: a
refused login, a missing ACL, an untrusted certificate) apart from what a retry may heal."""

from __future__ import annotations

import ssl

import kafka.errors as kerrors
import pytest

from kafkaio.errors import KafkaAuthError, KafkaUnreachable
from kafkaio.failures import FAILURE_KINDS, failure_kind


def _caused(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as e:
            raise outer from e
    except Exception as e:
        return e


@pytest.mark.parametrize(("exc", "kind"), [
    (KafkaAuthError("SCRAM refused"), "auth"),
    (kerrors.SaslAuthenticationFailedError("bad password"), "auth"),
    (kerrors.TopicAuthorizationFailedError("no Describe ACL on orders"), "auth"),
    (kerrors.ClusterAuthorizationFailedError("no Alter ACL on the cluster"), "auth"),
    (ssl.SSLCertVerificationError("self-signed certificate"), "auth"),
    (kerrors.KafkaTimeoutError("metadata"), "timeout"),
    (TimeoutError(), "timeout"),
    (KafkaUnreachable("no bootstrap server reachable"), "unreachable"),
    (ConnectionRefusedError(), "unreachable"),
    (_caused(RuntimeError("describe failed"), kerrors.GroupAuthorizationFailedError("replay")), "auth"),
    (RuntimeError("the request timed out"), "timeout"),
    (ValueError("something else"), "error"),
])
def test_kind(exc: Exception, kind: str) -> None:
    assert failure_kind(exc) == kind
    assert kind in FAILURE_KINDS
