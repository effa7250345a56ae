"""Admin clients kept per client config by a (reused) Python worker, for the asking a lane does besides copying.

A fresh lane start asked the clusters through four new admin clients (the source's offsets, the target's record
size limits, both sides' topic ids), each connecting and fetching metadata before its first answer; the route
watch asks the source every refresh interval. One kept client per config serves them all (librdkafka handles
are thread-safe: a lane's carrying thread and a task may ask at once), and reconnects by itself after an outage.
"""
from __future__ import annotations

import threading

from confluent_kafka.admin import AdminClient

_KEPT: dict[str, AdminClient] = {}
_LOCK = threading.Lock()


def kept_admin(conf: dict[str, str]) -> AdminClient:
    """This process' admin client for `conf` (a changed Secret or setting makes another)."""
    key = repr(sorted(conf.items()))
    with _LOCK:
        admin = _KEPT.get(key)
        if admin is None:
            admin = _KEPT[key] = AdminClient(conf)
        return admin
