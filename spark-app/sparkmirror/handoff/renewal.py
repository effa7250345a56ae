"""The holder's side of the Lease: a driver renews `spec.renewTime` of each Lease that names its generation.

The operator moves the Lease (the holder annotation, `holderIdentity`); a renewal is the holder saying it is
alive, so that a frozen successor (SIGSTOP, a paused VM: its application stays RUNNING) is rolled back after
`leaseDurationSeconds` rather than `handoffTimeoutSeconds` (operator/.../renewal.py decides). Each renewal is
conditional on the resourceVersion it read, so a renewal never lands on a Lease that moved meanwhile: a renewal
after a move is always the new holder's.
"""
from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..resource.names import LEASE_HOLDER

log = logging.getLogger(__name__)


def renew_every(duration_seconds: float) -> float:
    """A third of the Lease's duration (two renewals may fail before it runs out), between 0.5 and 5 s."""
    return min(5.0, max(0.5, duration_seconds / 3))


def renewal_patch(resource_version: str, now: dt.datetime | None = None) -> dict[str, Any]:
    """The patch of one renewal: `spec.renewTime` (a MicroTime), only if the Lease is still at `resource_version`
    (409 otherwise: it moved, or the operator or another report wrote it; the next round reads it again)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    return {"metadata": {"resourceVersion": resource_version},
            "spec": {"renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}


class Renewal:
    """In a daemon thread: every `renew_every(leaseDurationSeconds)`, renew each Lease (namespace, name) whose
    holder annotation is `generation`; a Lease that names another generation is left alone (a standby, a hot
    spare). A failed renewal is said once, then retried on the next round."""

    def __init__(self, api, leases: list[tuple[str, str, int]], stop: threading.Event,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.timezone.utc)) -> None:
        self.api, self.leases, self.stop, self.clock = api, leases, stop, clock
        self.renewals = 0
        self._trouble = ""

    def round(self) -> float:
        """Renew what this generation holds once; returns the seconds until the next round."""
        every = 5.0
        for namespace, name, generation in self.leases:
            try:
                lease = self.api.read_namespaced_lease(name, namespace)
                every = min(every, renew_every(float(lease.spec.lease_duration_seconds or 15)))
                if (lease.metadata.annotations or {}).get(LEASE_HOLDER) != str(generation):
                    continue
                self.api.patch_namespaced_lease(name, namespace,
                                                renewal_patch(lease.metadata.resource_version, self.clock()))
                self.renewals += 1
                self._said("")
            except Exception as e:  # noqa: BLE001 - a conflict, the API server away: the next round tries again
                status = getattr(e, "status", None)
                if status != 409:
                    self._said(f"cannot renew Lease {namespace}/{name}: "
                               f"{status or ''} {getattr(e, 'reason', '') or e}".strip())
        return every

    def _said(self, trouble: str) -> None:
        if trouble and trouble != self._trouble:
            log.warning("%s; trying again", trouble)
        elif not trouble and self._trouble:
            log.info("the Lease is renewed again")
        self._trouble = trouble

    def start(self) -> threading.Thread:
        def loop() -> None:
            every = 0.5
            while not self.stop.wait(every):
                every = self.round()

        thread = threading.Thread(target=loop, name="sparkmirror-lease-renewal", daemon=True)
        thread.start()
        return thread
