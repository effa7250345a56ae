"""Admin clients kept per client config by a (reused) Python worker, for the asking a lane does besides copying.

A fresh lane start asked the clusters through four new admin clients (the source's offsets, the target's record
size limits, both sides' topic ids), each connecting and fetching metadata before its first answer; the route
watch asks the source every refresh interval. One kept client per config serves them all (librdkafka handles
are thread-safe: a lane's carrying thread and a task may ask at once), and reconnects by itself after an outage.
"""
from __future__ import annotations

import threading

from confluent_kafka.admin import AdminClient

from ..credentials import SECRET_KEYS, conf_files_digest

_KEPT: dict[str, tuple[str, AdminClient]] = {}
"""The config without its secrets -> (the whole config and the files it names, the client)."""
_LOCK = threading.Lock()


def kept_admin(conf: dict[str, str]) -> AdminClient:
    """This process' admin client for `conf`. A changed Secret (a password in `conf`, or a certificate file it
    names, replaced in place) or setting makes another, which replaces the one of the same settings otherwise:
    the old one's credentials may be refused by now (it goes once the callers holding it let go)."""
    who = repr(sorted((k, v) for k, v in conf.items() if k not in SECRET_KEYS))
    key = repr(sorted(conf.items())) + conf_files_digest(conf)
    with _LOCK:
        kept = _KEPT.get(who)
        if kept is None or kept[0] != key:
            kept = _KEPT[who] = (key, AdminClient(conf))
        return kept[1]
