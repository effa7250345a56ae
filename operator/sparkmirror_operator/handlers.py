"""kopf handlers: thin. Each reads the resource, calls the Reconciler (pure rendering + apply), writes the status
and posts Events. Errors for one resource land on its status; the operator keeps serving the others.

Tunables (environment): SPARKMIRROR_STATUS_INTERVAL (seconds between status/lag refreshes, default 30),
SPARKMIRROR_HANDOFF_INTERVAL (seconds between looks at a handoff's deadlines while one is under way, default 2).
"""
from __future__ import annotations

import logging
import os
from typing import Any

import kopf
from kubernetes.client import ApiException

from . import metrics
from .kubeapi import KubeApi, api_client
from .leader import identity
from sparkmirror.resource.model import GROUP, KIND, PLURAL, VERSION
from .reconcile import Reconciler, Result
from .status import transitions
from .render import FIELD_MANAGER, LABEL_MANAGED_BY, LABEL_RESOURCE, Settings

EXIT_STATES = frozenset({"FAILING", "FAILED", "COMPLETED"})  # a SparkApplication whose driver ended
SCALING_REASONS = ("ScaledUp", "ScaledDown")
STATUS_INTERVAL = float(os.environ.get("SPARKMIRROR_STATUS_INTERVAL", "30"))
HANDOFF_INTERVAL = float(os.environ.get("SPARKMIRROR_HANDOFF_INTERVAL", "2"))
log = logging.getLogger(__name__)


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In a pod: the service account; elsewhere: $KUBECONFIG (read now, not at import) or ~/.kube/config."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return kopf.login_with_service_account(**kwargs)
    return kopf.login_with_kubeconfig(**kwargs)


@kopf.on.startup()
def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="sparkmirror.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="sparkmirror.io", key="last-handled-configuration")
    settings.persistence.finalizer = "sparkmirror.io/finalizer"
    settings.posting.level = logging.INFO
    settings.watching.server_timeout = 300
    settings.execution.max_workers = 8
    settings.posting.reporting_instance = identity()  # which replica acted, on every Event it posts
    memo.reconciler = Reconciler(KubeApi(api_client()), Settings.from_env(), refresh_s=STATUS_INTERVAL)


def _finish(body: kopf.Body, patch: kopf.Patch, result: Result) -> None:
    patch.status.update(result.status)
    metrics.count_handoffs(body["metadata"]["namespace"], body["metadata"]["name"], body.get("status"), result.status)
    metrics.expect(body["metadata"]["namespace"], body["metadata"]["name"], result.status,
                   (body.get("spec") or {}).get("state"), body["metadata"].get("uid"))
    for ev in result.events:
        kopf.event(body, type=ev.type, reason=ev.reason, message=ev.message[:1000])
    _announce(body, body.get("status"), result.status)


def _announce(body: Any, old: dict[str, Any] | None, new: dict[str, Any]) -> None:
    """Events for condition flips (Ready, Degraded); InvalidSpec is announced by the reconcile itself."""
    for type_, reason, message in transitions(old, new):
        if reason != "InvalidSpec":
            kopf.event(body, type=type_, reason=reason, message=message[:1000])


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    _finish(body, patch, metrics.timed("change", lambda: memo.reconciler.reconcile(dict(body), apply=True)))


def _write_status(api: KubeApi, body: Any, status: dict[str, Any]) -> bool:
    """Patch the status computed from `body`, unless the resource changed since `body` was read.

    A refresh (timer, SparkApplication event) runs beside the create/update handler. Written unconditionally,
    a refresh computed from an older view would put back the older observedGeneration after the handler had
    acted on a newer spec, and later refreshes (which keep the generation last acted on) would keep it there.
    False: skipped, the next refresh computes from a fresh view. A status equal to the one `body` holds is not
    sent at all (True: it stands): most refreshes of a mirror that is idle or keeping up change nothing."""
    meta = body["metadata"]
    if unchanged(body.get("status"), status):
        metrics.expect(meta["namespace"], meta["name"], status, (body.get("spec") or {}).get("state"), meta.get("uid"))
        return True
    try:
        api.patch_status(KIND, meta["namespace"], meta["name"], status, resource_version=meta["resourceVersion"])
        metrics.count_handoffs(meta["namespace"], meta["name"], body.get("status"), status)
        metrics.expect(meta["namespace"], meta["name"], status, (body.get("spec") or {}).get("state"), meta.get("uid"))
        return True
    except ApiException as e:
        if e.status == 409:
            log.debug("%s/%s changed while its status was computed; skipped", meta["namespace"], meta["name"])
            return False
        raise


def unchanged(old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
    """Whether merge-patching `new` onto `old` would change nothing (a None in `new` removes a field)."""
    held = dict(old or {})
    return all(held.get(k) == v for k, v in new.items())


def _upgrading(status: dict[str, Any] | None) -> bool:
    return any(c.get("type") == "Upgrading" and c.get("status") == "True"
               for c in (status or {}).get("conditions") or [])


def _stopped_unasked(status: dict[str, Any] | None) -> bool:
    """A generation exited 0 while its Lease names it, too recently to submit it again at once: a later
    refresh must apply (exitcontract.py)."""
    return any(c.get("type") == "Degraded" and "exited 0 while its Lease names it" in (c.get("message") or "")
               for c in (status or {}).get("conditions") or [])


def _failover_pending(body: Any) -> bool:
    """spec.failover lists other mirrors than status.failover records (one failed or is to be undone)."""
    want = ((body.get("spec") or {}).get("failover") or {}).get("mirrors") or []
    have = [r.get("mirror") for r in (body.get("status") or {}).get("failover") or []]
    return sorted(want) != sorted(have)


@kopf.timer(GROUP, VERSION, PLURAL, interval=STATUS_INTERVAL, initial_delay=1.0, sharp=False)
def refresh_status(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """Periodic status: application states and lag from Kafka. Applies only while a handoff is under way (its
    timeouts are decided here when no Lease or application event comes), a failover is still to be done
    (one that could not run is tried again here) or autoscaling changes the scale (it decides here, from the lag
    just read: `Reconciler.reconcile`). A status that came out as the resource holds it is not written again."""
    upgrading = _upgrading(body.get("status")) or _failover_pending(body) or _stopped_unasked(body.get("status"))
    result = metrics.timed("refresh", lambda: memo.reconciler.reconcile(dict(body), apply=upgrading, with_lag=True))
    written = _write_status(memo.reconciler.api, body, result.status)
    # a scaling decision wrote status.autoscaling itself (this write then finds a newer resource): told either way
    for ev in result.events if upgrading or result.acted else []:
        if written or ev.reason in SCALING_REASONS:
            kopf.event(body, type=ev.type, reason=ev.reason, message=ev.message[:1000])
    if written:
        _announce(body, body.get("status"), result.status)


@kopf.timer(GROUP, VERSION, PLURAL, interval=HANDOFF_INTERVAL, initial_delay=1.0, sharp=False)
def handoff_deadlines(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """While a handoff is under way, its deadlines are looked at every few seconds: a frozen successor sends no
    event, and a successor silent for `leaseDurationSeconds` (renewal.py) is to be moved back from then, not at
    the next status refresh. Without lag (the status timer reads it); nothing at all outside a handoff."""
    if not _upgrading(body.get("status")):
        return
    result = metrics.timed("handoff", lambda: memo.reconciler.reconcile(dict(body), apply=True))
    if _write_status(memo.reconciler.api, body, result.status):
        for ev in result.events:
            kopf.event(body, type=ev.type, reason=ev.reason, message=ev.message[:1000])
        _announce(body, body.get("status"), result.status)


def _owner(body: kopf.Body, memo: kopf.Memo) -> tuple[KubeApi, str, str] | None:
    """(api, namespace, name) of the KafkaMirrorMaker2 an object of ours belongs to (None: not ours, or the
    operator is not started yet)."""
    meta = body.get("metadata", {})
    owner = (meta.get("labels") or {}).get(LABEL_RESOURCE)
    namespace = meta.get("namespace")
    if not owner or not namespace or "reconciler" not in memo:
        return None
    return memo.reconciler.api, namespace, owner


@kopf.on.event(GROUP, VERSION, PLURAL)
def resource_event(body: kopf.Body, event: dict[str, Any], **_: Any) -> None:
    """A resource deleted (or being deleted): its flow groups are no longer expected to serve metrics, so the
    mirror-gone alert does not fire for what was removed on purpose."""
    meta = body.get("metadata") or {}
    if event.get("type") == "DELETED" or meta.get("deletionTimestamp"):
        metrics.forget(meta.get("namespace", ""), meta.get("name", ""), meta.get("uid"))


def lease_news(body: Any) -> str:
    """What of a Lease the handoff acts on: its annotations (the holder, the drivers' reports) and the operator's
    spec fields. Not `spec.renewTime`: a holder renews every few seconds, which moves no handoff on (a holder that
    stopped renewing sends no event at all: the status timer finds it)."""
    import json

    spec = {k: v for k, v in (body.get("spec") or {}).items() if k != "renewTime"}
    return json.dumps([(body.get("metadata") or {}).get("annotations") or {}, spec], sort_keys=True)


@kopf.on.event("coordination.k8s.io", "v1", "leases", labels={LABEL_MANAGED_BY: FIELD_MANAGER})
def lease_changed(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A worker generation reported on its flow group's Lease (ready, took over): the handoff moves on now. A
    renewal alone is no news (`lease_news`)."""
    found = _owner(body, memo)
    if found is None:
        return
    seen = memo.setdefault("lease_news", {})
    key, news = (body["metadata"].get("namespace"), body["metadata"].get("name")), lease_news(body)
    if seen.get(key) == news:
        return
    seen[key] = news
    api, namespace, owner = found
    for _attempt in range(3):
        kmm2 = api.get(KIND, namespace, owner)
        if kmm2 is None or kmm2["metadata"].get("deletionTimestamp") or not _upgrading(kmm2.get("status")):
            return
        result = metrics.timed("lease", lambda: memo.reconciler.reconcile(kmm2, apply=True))
        if _write_status(api, kmm2, result.status):
            for ev in result.events:
                kopf.event(kmm2, type=ev.type, reason=ev.reason, message=ev.message[:1000])
            _announce(kmm2, kmm2.get("status"), result.status)
            return


@kopf.on.event("sparkoperator.k8s.io", "v1beta2", "sparkapplications",
               labels={LABEL_MANAGED_BY: FIELD_MANAGER})
def application_changed(body: kopf.Body, event: dict[str, Any], memo: kopf.Memo, **_: Any) -> None:
    """A SparkApplication of ours changed (the Spark operator wrote its state): refresh its owner's status.
    Deleted behind the operator's back while its resource still wants it: apply again."""
    found = _owner(body, memo)
    if found is None:
        return
    api, namespace, owner = found
    recreate = event.get("type") == "DELETED"
    # a driver that ended: the exit contract may act on it (a refusal is removed before the Spark operator
    # submits it again, an exit 0 nothing took over is submitted again: exitcontract.py)
    ended = ((body.get("status") or {}).get("applicationState") or {}).get("state") in EXIT_STATES
    for _attempt in range(3):  # the resource may change while its status is computed: read it again
        kmm2 = api.get(KIND, namespace, owner)
        if kmm2 is None or kmm2["metadata"].get("deletionTimestamp"):
            return
        old = kmm2.get("status") or {}
        recreate = recreate and (kmm2.get("spec") or {}).get("state") != "stopped"
        act = recreate or (ended and (kmm2.get("spec") or {}).get("state") != "stopped")
        result = metrics.timed("application", lambda: memo.reconciler.reconcile(kmm2, apply=act))
        status = result.status
        again = result.applied or (recreate and _applied_elsewhere(api, namespace, body))
        if recreate and again:
            kopf.event(kmm2, type="Warning", reason="Recreated",
                       message=f"SparkApplication {body.get('metadata', {}).get('name')} was deleted; applied again: "
                               + ", ".join(again))
            recreate = False  # done; a retry only refreshes the status
        if {k: v for k, v in status.items() if k != "conditions"} == \
                {k: old.get(k) for k in status if k != "conditions"} and _conds(status) == _conds(old):
            return
        if _write_status(api, kmm2, status):
            _announce(kmm2, old, status)
            return


def _applied_elsewhere(api: KubeApi, namespace: str, deleted: kopf.Body) -> list[str]:
    """The deleted application as already applied again by another reconcile (the periodic one applies while a
    handoff is under way, and may come first): it exists under a new uid. The deletion is still worth saying."""
    meta = deleted.get("metadata") or {}
    now = api.get("SparkApplication", namespace, meta.get("name", ""))
    if now is None or now["metadata"].get("uid") == meta.get("uid"):
        return []
    return [f"SparkApplication/{meta.get('name')}"]


def _conds(status: dict[str, Any]) -> list[tuple]:
    return [(c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in status.get("conditions") or []]
