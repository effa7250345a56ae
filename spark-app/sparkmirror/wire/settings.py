"""A cluster's client settings, as the lanes' librdkafka clients take them, in kafka-python's names: what
`cluster.Wire` and `connection.BrokerConnection` are made with."""
from __future__ import annotations

from typing import Any


class WireSettingError(ValueError):
    """A client setting the wire cannot take; the message names it (the batch path reports it as a `CopyError`,
    `copying/wiretalk.py`)."""


_CONF = {  # librdkafka's names (the lane's client settings) -> kafka-python's
    "bootstrap.servers": "bootstrap_servers", "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism", "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username", "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile", "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile", "ssl.key.password": "ssl_password", "client.id": "client_id",
}
_CONF_MS = {  # connection settings a cluster's config gives every client (docs/client-settings.md), in ms
    "socket.timeout.ms": "request_timeout_ms", "request.timeout.ms": "request_timeout_ms",
    "reconnect.backoff.ms": "reconnect_backoff_ms", "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
    "socket.connection.setup.timeout.ms": "socket_connection_setup_timeout_ms",
    "connections.max.idle.ms": "connections_max_idle_ms", "metadata.max.age.ms": "metadata_max_age_ms",
}


def wire_config(conf: dict[str, str]) -> dict[str, Any]:
    """kafka-python settings for a lane's librdkafka client settings (the ones both clients know). Several CA
    files reach a lane as PEM text (`ssl.ca.pem`): kafka-python takes no such text, so an SSL context of our own
    carries it (with the client certificate and key files, when given)."""
    out: dict[str, Any] = {_CONF[k]: v for k, v in conf.items() if k in _CONF}
    for k, v in conf.items():
        if k in _CONF_MS:
            try:
                out[_CONF_MS[k]] = int(v)
            except ValueError:
                raise WireSettingError(f"client setting {k}={v!r}: expected a number of milliseconds") from None
    if "security_protocol" in out:
        out["security_protocol"] = out["security_protocol"].upper()
    if conf.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
        out["ssl_check_hostname"] = False
    if conf.get("ssl.ca.pem"):
        import ssl

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = out.get("ssl_check_hostname", True)
        ctx.load_verify_locations(cadata=conf["ssl.ca.pem"])
        if out.get("ssl_certfile"):
            ctx.load_cert_chain(out["ssl_certfile"], out.get("ssl_keyfile"), out.get("ssl_password"))
        out["ssl_context"] = ctx
    return out
