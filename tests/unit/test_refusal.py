"""Telling a refused login from an outage (sparkmirror.refusal), without brokers: the broker-side cases run on
real secured brokers in tests/job/test_security.py and tests/operator/test_secured_clusters.py."""
from __future__ import annotations

import time

from sparkmirror.refusal import failure_reason, refusal


def test_broker_addresses_do_not_decide_the_reason() -> None:
    """`sasl_ssl://` in a broker's name is no SASL refusal: an untrusted CA there is a TLS one."""
    where = "sasl_ssl://127.0.0.1:9093/bootstrap: "
    assert failure_reason(where + "SSL handshake failed: certificate verify failed") == "TlsFailed"
    assert failure_reason(where + "SASL authentication error: Authentication failed") == "AuthenticationFailed"
    assert failure_reason(where + "Connect to ipv4#127.0.0.1:9093 failed: Connection refused") == \
        "ClusterUnreachable"


def test_a_plaintext_client_is_never_probed() -> None:
    """Nothing to refuse without TLS or SASL: an outage of a plaintext cluster is not made longer by probes."""
    t0 = time.monotonic()
    assert refusal({"bootstrap.servers": "127.0.0.1:1"}, timeout=5.0) is None
    assert time.monotonic() - t0 < 0.5
