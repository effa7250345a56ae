"""The operator's Lease, seen from a worker generation's driver: wait for it, report on it, notice it move on.

The operator alone moves the Lease (annotation `sparkmirror.io/holder-generation`); a driver only reads it,
writes its own reports (ready, took over) as annotations and, while it holds it, renews it (renewal.py), so two
generations never race for it. Correctness
does not hang on the Lease (the generation marks and fencing of takeover.py do that); it decides *when*.
The one place in the job that talks to Kubernetes: in a pod through its service account, elsewhere through
$KUBECONFIG (the tests' stand-in for the Spark operator).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..resource.flowgroup import FlowGroupConfig
from ..resource.names import (LEASE_FAILURE, LEASE_HOLDER, LEASE_REVOKED, SUBMISSION_ENV, lease_ready_key,
                              lease_took_over_key)
from .takeback import Revoked
from .takeover import HandoffError, Takeover

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LeaseRef:
    namespace: str
    name: str
    generation: int  # this driver's generation of the Lease's flow group


def _coordination_api():
    from kubernetes import client, config

    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
        return client.CoordinationV1Api()
    path = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    return client.CoordinationV1Api(config.new_client_from_config(config_file=path.split(os.pathsep)[0]))


class LeaseGate:
    """Whether this driver's generation holds its flow groups' Leases, looked at every `poll` seconds (a look at
    what the Leases' watch delivered: no request while it is live)."""

    def __init__(self, leases: list[LeaseRef], api=None, poll: float = 0.5) -> None:
        self.leases, self.poll = leases, poll
        try:
            self.api = api or _coordination_api()
        except Exception as e:  # noqa: BLE001 - no Kubernetes API: this generation cannot know when to copy
            raise HandoffError(f"worker.leaseName is set but the Kubernetes API is not reachable: {e}") from None
        self.successor: int | None = None
        self.taken_back: set[int] = set()  # generations its flow groups were taken back from (and all before)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewing = threading.Event()  # set: no more renewals (a failure was reported, or `close`)
        self._renewal: threading.Thread | None = None
        self._trouble = ""
        self._watch = None  # leasewatch.LeaseWatch, started on the first look

    @classmethod
    def for_configs(cls, configs: list[FlowGroupConfig], **kw) -> "LeaseGate":
        return cls([LeaseRef(c.worker.leaseNamespace or "default", c.worker.leaseName or "", c.worker.generation)
                    for c in configs], **kw)

    def annotations(self) -> dict[LeaseRef, dict[str, str] | None]:
        """Each Lease's annotations (None: the Lease cannot be read now): as its watch last delivered them
        (leasewatch.py), read from the API server while the watch is not live."""
        from kubernetes.watch import Watch

        from .leasewatch import LeaseWatch

        if self._watch is None:
            self._watch = LeaseWatch(self.api, list(dict.fromkeys((r.namespace, r.name) for r in self.leases)),
                                     self._stop, Watch)
            self._watch.start()
        out: dict[LeaseRef, dict[str, str] | None] = {}
        for ref in self.leases:
            live, seen = self._watch.annotations(ref.namespace, ref.name)
            if live and seen is not None:
                out[ref] = seen
                continue
            try:
                out[ref] = dict(self.api.read_namespaced_lease(ref.name, ref.namespace).metadata.annotations or {})
                self._ok()
            except Exception as e:  # noqa: BLE001 - the API server restarts too: say so once, keep asking
                self._problem(f"Lease {ref.namespace}/{ref.name} cannot be read: {_reason(e)}")
                out[ref] = None
        return out

    def holders(self) -> dict[LeaseRef, int | None]:
        """The generation each Lease names (None: not named yet, or the Lease cannot be read now)."""
        return {ref: int(v) if (v := (a or {}).get(LEASE_HOLDER)) else None for ref, a in self.annotations().items()}

    def _problem(self, what: str) -> None:
        if what != self._trouble:
            log.warning("%s; asking again", what)
            self._trouble = what

    def _ok(self) -> None:
        if self._trouble:
            log.info("the Lease can be read again")
            self._trouble = ""

    def _annotate(self, values: dict[LeaseRef, dict[str, str]]) -> None:
        for ref, annotations in values.items():
            for attempt in range(5):
                try:
                    self.api.patch_namespaced_lease(ref.name, ref.namespace, {"metadata": {"annotations": annotations}})
                    break
                except Exception as e:  # noqa: BLE001 - a report is worth retrying; the copy does not hang on it
                    if attempt == 4:
                        log.warning("cannot report %s on Lease %s/%s: %s", sorted(annotations), ref.namespace,
                                    ref.name, _reason(e))
                    time.sleep(0.5)

    def report_failure(self, code: int, message: str) -> None:
        """names.LEASE_FAILURE on every Lease of this generation, before the driver exits with `code`. Renewing
        stops first (a round under way finishes): the operator shows the record until the generation renews after
        it, and a driver on its way out renewing once more would hide its own words."""
        self._stop_renewing()
        at_ms = int(time.time() * 1000)  # the operator shows it until the generation renews its Lease after this
        self._annotate({ref: {LEASE_FAILURE: json.dumps({"generation": ref.generation, "exitCode": code,
                                                         "message": message[:900], "atMs": at_ms})}
                        for ref in self.leases})

    def report_ready(self) -> None:
        report = json.dumps({"atMs": int(time.time() * 1000), "submissionID": os.environ.get(SUBMISSION_ENV) or None})
        self._annotate({ref: {lease_ready_key(ref.generation): report} for ref in self.leases})
        log.info("standby: generation(s) %s ready; waiting for the Lease", sorted({r.generation for r in self.leases}))

    def report_took_over(self, took: Takeover, first: dict[str, int] | None = None,
                         lease_name: str | None = None) -> None:
        """`took-over.g<N>` on the Lease of `lease_name` (every Lease of the generation when None): the takeover
        and the first epoch committed after it (`first_epoch`), which is what the operator waits for."""
        value = json.dumps({"atMs": took.at_ms, "tookMs": took.took_ms, "fenced": len(took.fenced), **(first or {})})
        self._annotate({ref: {lease_took_over_key(ref.generation): value} for ref in self.leases
                        if ref.generation == took.generation and lease_name in (None, ref.name)})

    def report_first_epoch(self, took: Takeover, lease_name: str | None, before: dict[str, dict],
                           stop: threading.Event, snapshots: Callable[[], dict[str, dict]],
                           pause: Callable[[bool], int | None] | None = None) -> threading.Thread:
        """`report_took_over` once the first epoch after the takeover committed (`first_epoch` of the mirrors'
        stats `before` it and `snapshots()` now): a takeover whose lanes never commit hands nothing over, so the
        operator keeps the old generation until this report. With `pause` (`PauseClock.read`, asked meanwhile
        and once more with final=True), the visible pause goes with it as `pauseMs`. In the background: the copy
        does not wait."""
        from .takeover import first_epoch

        def wait() -> None:
            while not stop.is_set():
                if pause is not None:
                    pause(False)
                first = first_epoch(before, snapshots())
                if first is not None:
                    ms = pause(True) if pause is not None else None
                    self.report_took_over(took, {**first, **({"pauseMs": ms} if ms is not None else {})}, lease_name)
                    log.info("generation %d committed its first epoch after the takeover (%d records; the visible "
                             "pause %s ms)", took.generation, first["firstEpochRecords"], ms)
                    return
                stop.wait(0.2)

        thread = threading.Thread(target=wait, name=f"first-epoch-{lease_name}", daemon=True)
        thread.start()
        return thread

    def wait_until_held(self, stop: threading.Event) -> bool:
        """Block until every Lease names this driver's generation (True) or `stop` is set (False)."""
        said = False
        while not stop.is_set():
            holders = self.holders()
            if all(holders[r] == r.generation for r in self.leases):
                log.info("the Lease names this generation: taking over")
                return True
            later = [h for r in self.leases if (h := holders[r]) is not None and h > r.generation]
            if later and not said:
                log.warning("a later worker generation (%d) holds the Lease: this one stays in standby until it "
                            "is removed", max(later))
                said = True
            stop.wait(self.poll)
        return False

    def spare_verdict(self, successor: int) -> tuple[str, list[Revoked]]:
        """For a hot spare (this generation handed over to `successor`): "back" once every Lease names this
        generation again (the successor failed before its first commit; with what the operator revoked), "over"
        once every Lease carries the successor's `took-over` report, "" meanwhile or when a Lease cannot be read."""
        back = over = True
        revoked: list[Revoked] = []
        for ref, annotations in self.annotations().items():
            if annotations is None:
                return "", []
            back = back and annotations.get(LEASE_HOLDER) == str(ref.generation)
            over = over and lease_took_over_key(successor) in annotations
            if (r := Revoked.parse(annotations.get(LEASE_REVOKED))) is not None:
                revoked.append(r)
        return ("back" if back else "over" if over else ""), revoked

    def wait_as_spare(self, successor: int, stop: threading.Event) -> tuple[str, list[Revoked]]:
        """Block until `spare_verdict` says "back" or "over", or `stop` is set (""). Asked every 0.2 s at most:
        while the Lease moves back, nothing copies."""
        while not stop.is_set():
            verdict = self.spare_verdict(successor)
            if verdict[0]:
                return verdict
            stop.wait(min(self.poll, 0.2))
        return "", []

    def watch(self, lost: threading.Event, every: float = 0.25,
              on_lost: Callable[[], None] = lambda: None) -> None:
        """In a daemon thread: once any Lease names a later generation, call `on_lost` (at once, in this thread:
        the driver stops planning epochs, whose new lanes would fence the later generation's) and set `lost`. The
        same once a Lease names this generation with a take-back due (`names.LEASE_REVOKED` of a later one, not
        taken back yet): it moved on and back between two looks, or before this driver started; `spare_verdict`
        then says "back" at once."""

        def loop() -> None:
            while not self._stop.wait(every):
                seen = self.annotations()
                holders = {r: int(v) if (v := (a or {}).get(LEASE_HOLDER)) else None for r, a in seen.items()}
                later = [h for r in self.leases if (h := holders[r]) is not None and h > r.generation]
                # the Lease moved on and back before this look (or before this driver started): a take-back is due
                back = [g for r in self.leases if holders[r] == r.generation and
                        (rv := Revoked.parse((seen[r] or {}).get(LEASE_REVOKED))) is not None and
                        (g := rv.generation) > max([r.generation, *self.taken_back])]
                if later or back:
                    self.successor = max(later or back)
                    on_lost()
                    lost.set()
                    return

        self._thread = threading.Thread(target=loop, name="sparkmirror-lease", daemon=True)
        self._thread.start()

    def keep_renewed(self) -> None:
        """Renew each Lease while it names this generation (renewal.py), until `close`."""
        from .renewal import Renewal

        self._renewal = Renewal(self.api, [(r.namespace, r.name, r.generation) for r in self.leases],
                                self._renewing).start()

    def _stop_renewing(self) -> None:
        self._renewing.set()
        if self._renewal is not None:
            self._renewal.join(30)  # (a round is one read and one patch per Lease)

    def close(self) -> None:
        self._stop.set()
        self._renewing.set()


def _reason(e: Exception) -> str:
    status = getattr(e, "status", None)
    return f"{status} {getattr(e, 'reason', '')}".strip() if status else (str(e).splitlines()[0] if str(e) else repr(e))
