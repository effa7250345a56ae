"""Leader election on a coordination.k8s.io/v1 Lease: several operator replicas run, exactly one acts.

The protocol is client-go's (so Strimzi's and every controller-runtime operator's): the leader renews the
Lease's renewTime every retry period; a candidate takes the Lease when its holder is empty (released on a
graceful shutdown) or when the record has not changed for leaseDurationSeconds *on the candidate's own clock*
(no comparison of clocks across machines). Every write carries the resourceVersion read, so of two candidates
racing for an expired Lease one wins and the other gets 409. A leader that cannot renew within the renew
deadline stops acting and exits; it is never left running beside a new leader.

kopf's peering is not used: it needs its own CRDs and freezes every operator when two share a priority, as the
replicas of one Deployment do. The kubernetes client's `leaderelection` module is not used either: it cannot
be stopped nor release the Lease on shutdown (a rolling update would wait a whole lease duration).
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

from kubernetes.client import ApiException
from urllib3.exceptions import HTTPError

from .kubeapi import KubeApi

log = logging.getLogger(__name__)
DEFAULT_LEASE = "sparkmirror-operator-leader"


@cache
def identity() -> str:
    """This replica's name on the Lease and on the Events it posts: the pod's name (downward API) or host-pid."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class Timing:
    """client-go's defaults: a dead leader is replaced within lease_duration + retry_period."""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def problems(self) -> list[str]:
        """Errors naming the command-line options (empty: usable)."""
        errs = [f"--leader-elect-{flag} must be > 0 (got {v:g})" for flag, v in
                (("lease-duration", self.lease_duration), ("renew-deadline", self.renew_deadline),
                 ("retry-period", self.retry_period)) if v <= 0]
        if not errs and self.renew_deadline >= self.lease_duration:
            errs.append(f"--leader-elect-renew-deadline ({self.renew_deadline:g}) must be less than "
                        f"--leader-elect-lease-duration ({self.lease_duration:g})")
        if not errs and self.retry_period >= self.renew_deadline:
            errs.append(f"--leader-elect-retry-period ({self.retry_period:g}) must be less than "
                        f"--leader-elect-renew-deadline ({self.renew_deadline:g})")
        return errs


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def claim(lease: dict[str, Any], me: str, duration: float) -> dict[str, Any]:
    """The Lease rewritten with `me` as its holder (a renewal when it already is), resourceVersion kept so the
    write fails with 409 if anybody wrote in between. Pure."""
    spec = dict(lease.get("spec") or {})
    now = _now()
    if spec.get("holderIdentity") != me:
        spec["acquireTime"] = now
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if spec.get("holderIdentity") else 0)
    spec.update(holderIdentity=me, leaseDurationSeconds=max(1, round(duration)), renewTime=now)
    return {**lease, "spec": spec}


def released(lease: dict[str, Any]) -> dict[str, Any]:
    """The Lease with no holder: the next candidate takes it at its next try, without waiting for expiry. Pure."""
    spec = {k: v for k, v in (lease.get("spec") or {}).items() if k != "holderIdentity"}
    spec.update(leaseDurationSeconds=1, renewTime=_now())
    return {**lease, "spec": spec}


class LeaderElector:
    """One candidate's view of the election Lease (I/O through KubeApi)."""

    def __init__(self, api: KubeApi, namespace: str, name: str = DEFAULT_LEASE, me: str | None = None,
                 timing: Timing = Timing(), clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.me = me or identity()
        self.timing = timing
        self.clock = clock
        self.holder = ""  # as last read
        self._seen: tuple[str, str] | None = None  # (holder, resourceVersion) last read, and when it changed
        self._seen_at = 0.0

    @property
    def where(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def try_acquire_or_renew(self) -> bool:
        """One round: True when this candidate holds the Lease afterwards."""
        lease = self.api.get("Lease", self.namespace, self.name)
        if lease is None:
            fresh = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": self.name, "namespace": self.namespace,
                                  "labels": {"app.kubernetes.io/name": "sparkmirror",
                                             "app.kubernetes.io/component": "leader-election"}}}
            return self._write(self.api.create, claim(fresh, self.me, self.timing.lease_duration))
        spec = lease.get("spec") or {}
        self.holder = spec.get("holderIdentity") or ""
        seen = (self.holder, lease["metadata"].get("resourceVersion", ""))
        if seen != self._seen:
            self._seen, self._seen_at = seen, self.clock()
        duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
        if self.holder and self.holder != self.me and self.clock() - self._seen_at < duration:
            return False  # held, and renewed within its duration as far as this clock can tell
        return self._write(self.api.replace, claim(lease, self.me, self.timing.lease_duration))

    def _write(self, call: Callable[[dict[str, Any]], dict[str, Any]], lease: dict[str, Any]) -> bool:
        try:
            call(lease)
        except ApiException as e:
            if e.status == 409:  # another candidate wrote first
                return False
            raise
        self.holder = self.me
        return True

    def release(self) -> None:
        """Give the Lease up if still ours (graceful shutdown: the standby takes over at its next try)."""
        try:
            lease = self.api.get("Lease", self.namespace, self.name)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.me:
                self.api.replace(released(lease))
                log.info("released leadership: %s is free for a standby", self.where)
        except (ApiException, HTTPError, OSError) as e:
            log.warning("could not release %s (%s); a standby takes it when it expires", self.where, e)

    def wait_for_leadership(self) -> float:
        """Stand by until this candidate holds the Lease; the seconds it waited."""
        start = self.clock()
        told = None
        while True:
            try:
                if self.try_acquire_or_renew():
                    return self.clock() - start
            except (ApiException, HTTPError, OSError) as e:
                log.warning("leader election: cannot read or write %s: %s", self.where, e)
            if self.holder and self.holder != told:
                log.info("standing by: %s is held by %s; taking over if it is not renewed for %gs",
                         self.where, self.holder, self.timing.lease_duration)
                told = self.holder
            time.sleep(self.timing.retry_period)

    def keep_leading(self, stop: threading.Event, on_lost: Callable[[str], None]) -> None:
        """Renew every retry period until `stop`; on_lost(why) when no renewal succeeds within the renew
        deadline or somebody else holds the Lease."""
        while not stop.wait(self.timing.retry_period):
            deadline = self.clock() + self.timing.renew_deadline
            while True:
                try:
                    if self.try_acquire_or_renew():
                        break
                    if self.holder and self.holder != self.me:
                        return on_lost(f"{self.where} is now held by {self.holder}")
                    why = "renewal refused"
                except (ApiException, HTTPError, OSError) as e:
                    why = f"cannot renew: {e}"
                if self.clock() >= deadline:
                    return on_lost(f"{why}; not renewed for {self.timing.renew_deadline:g}s")
                if stop.wait(self.timing.retry_period):
                    return


class _Health(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200 if self.path.split("?")[0] == self.server.path else 404)  # type: ignore[attr-defined]
        self.end_headers()
        self.wfile.write(b"standby\n")

    def log_message(self, *_: Any) -> None:
        pass


def standby_health(endpoint: str | None) -> ThreadingHTTPServer | None:
    """The liveness endpoint while standing by (kopf serves it once leading): a standby is alive, not idle."""
    if not endpoint:
        return None
    url = urlparse(endpoint)
    server = ThreadingHTTPServer((url.hostname or "0.0.0.0", url.port or 80), _Health)
    server.path = url.path or "/"  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, name="standby-health", daemon=True).start()
    return server


def run_elected(elector: LeaderElector,
                work: Callable[[asyncio.AbstractEventLoop, asyncio.Event], None],
                liveness_endpoint: str | None = None) -> int:
    """Stand by until leader, then run `work(loop, stop)` (kopf.run on that loop with that stop flag) while
    renewing. Exit code: 0 when the work ended (a signal) and the Lease was released; 1 when leadership was
    lost (the process must end: its replacement starts as a clean standby). A work that does not stop within
    the margin the lease leaves (lease duration - renew deadline) is cut short, so it never acts beside the
    next leader. The flag is an asyncio.Event set from the renewer's thread: kopf waits for a threading.Event
    in an executor thread, which would hold up its own shutdown on a signal."""
    health = standby_health(liveness_endpoint)
    log.info("leader election: %s as %s (lease %gs, renew deadline %gs, retry %gs)", elector.where, elector.me,
             elector.timing.lease_duration, elector.timing.renew_deadline, elector.timing.retry_period)
    waited = elector.wait_for_leadership()
    if health is not None:
        health.shutdown()
        health.server_close()
    log.info("became leader: %s holds %s (after %.1fs standing by); starting the operator",
             elector.me, elector.where, waited)
    loop, stop = asyncio.new_event_loop(), asyncio.Event()
    done, lost = threading.Event(), threading.Event()

    def on_lost(why: str) -> None:
        log.error("lost leadership: %s; stopping the operator", why)
        lost.set()
        try:
            loop.call_soon_threadsafe(stop.set)
        except RuntimeError:  # the loop is closed: the operator has stopped already
            return
        margin = max(1.0, elector.timing.lease_duration - elector.timing.renew_deadline)
        if not done.wait(margin):
            log.critical("the operator did not stop within %gs of losing leadership: exiting now", margin)
            os._exit(1)

    renewer = threading.Thread(target=elector.keep_leading, args=(done, on_lost), name="lease-renewer", daemon=True)
    renewer.start()
    try:
        work(loop, stop)
    finally:
        done.set()
        renewer.join(elector.timing.retry_period + 5)
        loop.close()
        if not lost.is_set():
            elector.release()
    return 1 if lost.is_set() else 0
