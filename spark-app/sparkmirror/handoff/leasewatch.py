"""The Leases a driver follows, kept current by a watch instead of a GET every second.

One watch per Lease (a field selector on its name: a driver sees no other Lease's changes). While a watch is
live, a look at the Lease is a look at what it last delivered, so a driver's loops (lease.LeaseGate) may look
as often as they like without asking the API server anything. When a watch is not live (not started yet, the
API server away, the right to watch missing), `annotations` says so and the caller reads the Lease itself.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

WATCH_SECONDS = 60  # the API server ends each watch after this; it is started again from the last version seen


class LeaseWatch:
    def __init__(self, api, leases: list[tuple[str, str]], stop: threading.Event,
                 watcher: Callable[[], Any]) -> None:
        """`watcher`: makes a `kubernetes.watch.Watch` (handed in by lease.py, the job's one Kubernetes client)."""
        self.api, self.leases, self.stop, self.watcher = api, leases, stop, watcher
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], dict[str, str] | None] = {}
        self._live: set[tuple[str, str]] = set()
        self._started = False

    def start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        for key in self.leases:
            threading.Thread(target=self._follow, args=key, name=f"sparkmirror-lease-watch-{key[1]}",
                             daemon=True).start()

    def annotations(self, namespace: str, name: str) -> tuple[bool, dict[str, str] | None]:
        """(live, the Lease's annotations as last delivered; None: there is no such Lease)."""
        with self._lock:
            key = (namespace, name)
            return key in self._live, (dict(a) if (a := self._seen.get(key)) is not None else None)

    def _put(self, key: tuple[str, str], lease: Any | None, live: bool = True) -> None:
        with self._lock:
            if lease is not None or live:
                self._seen[key] = None if lease is None else dict(lease.metadata.annotations or {})
            (self._live.add if live else self._live.discard)(key)

    def _follow(self, namespace: str, name: str) -> None:
        key, version, said = (namespace, name), None, ""
        selector = f"metadata.name={name}"
        while not self.stop.is_set():
            try:
                if version is None:  # (again) from a list: what is there now, and the version to watch from
                    listed = self.api.list_namespaced_lease(namespace, field_selector=selector)
                    self._put(key, listed.items[0] if listed.items else None)
                    version = listed.metadata.resource_version
                    if said:
                        log.info("watching Lease %s/%s again", namespace, name)
                        said = ""
                stream = self.watcher().stream(self.api.list_namespaced_lease, namespace, field_selector=selector,
                                              resource_version=version, timeout_seconds=WATCH_SECONDS,
                                              _request_timeout=WATCH_SECONDS + 15)
                for event in stream:
                    if self.stop.is_set():
                        return
                    if event["type"] == "ERROR":  # e.g. 410: the version is too old to watch from
                        version = None
                        break
                    obj = event["object"]
                    version = obj.metadata.resource_version
                    self._put(key, None if event["type"] == "DELETED" else obj)
            except Exception as e:  # noqa: BLE001 - the API server restarts, a right is missing: read instead
                self._put(key, None, live=False)
                version = None
                why = f"{getattr(e, 'status', '') or ''} {getattr(e, 'reason', '') or e}".strip()
                if why != said:
                    log.warning("cannot watch Lease %s/%s (%s): reading it instead", namespace, name, why[:200])
                    said = why
                self.stop.wait(2.0)
