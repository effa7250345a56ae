"""The operator's own Prometheus metrics: reconciles (by trigger and result), their duration, handoffs completed,
and the flow groups it expects to run (what the chart's SparkmirrorMirrorGone alert compares the drivers with).

Served on `--metrics-port` (the chart's `metrics.operatorPort`) from a registry of its own, so a test or a
second operator in one process never sees another's figures. Names follow Prometheus' conventions: `_total`
counters, seconds in a histogram; `EXPORTED` lists them (the chart's dashboard and alerts are checked against
it). A resource is named by `resource_namespace` and `resource`, never `namespace`: Prometheus' ServiceMonitor
sets `namespace` to the operator's own (the target's), and a series' own `namespace` would become
`exported_namespace`.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

T = TypeVar("T")

REGISTRY = CollectorRegistry(auto_describe=True)
RECONCILES = Counter("sparkmirror_operator_reconciles_total", "Reconciles of KafkaMirrorMaker2 resources, by "
                     "trigger (change, refresh, lease, application) and result (ok, error).",
                     ["trigger", "result"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram("sparkmirror_operator_reconcile_duration_seconds", "How long a reconcile took, "
                              "by trigger.", ["trigger"], registry=REGISTRY,
                              buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
HANDOFFS = Counter("sparkmirror_operator_handoffs_total", "Worker-generation handoffs completed, by resource "
                   "and flow group.", ["resource_namespace", "resource", "flow_group"], registry=REGISTRY)
EXPECTED = Gauge("sparkmirror_operator_flow_group_expected", "1 per flow group the operator runs an application "
                 "for (running, not failed over): its driver is expected to serve metrics.",
                 ["resource_namespace", "resource", "flow_group"], registry=REGISTRY)

EXPORTED = ("sparkmirror_operator_reconciles_total", "sparkmirror_operator_reconcile_duration_seconds",
            "sparkmirror_operator_handoffs_total", "sparkmirror_operator_flow_group_expected")
"""The families served, as scraped (a histogram's series add `_bucket`, `_sum`, `_count`)."""


def serve(port: int, addr: str = "0.0.0.0") -> int:
    """Start the endpoint (port 0: any free one); returns the port it listens on."""
    server, _thread = start_http_server(port, addr=addr, registry=REGISTRY)
    return server.server_port


@contextmanager
def reconciling(trigger: str) -> Iterator[None]:
    """Count and time one reconcile; an exception counts as an error and goes on up."""
    t0 = time.monotonic()
    result = "error"
    try:
        yield
        result = "ok"
    finally:
        RECONCILE_SECONDS.labels(trigger).observe(time.monotonic() - t0)
        RECONCILES.labels(trigger, result).inc()


def timed(trigger: str, fn: Callable[[], T]) -> T:
    with reconciling(trigger):
        return fn()


def _handoff_keys(status: dict[str, Any] | None) -> set[tuple[int, tuple[str, ...]]]:
    return {(int(h.get("toGeneration", 0)), tuple(h.get("toFlowGroups") or []))
            for h in (status or {}).get("handoffs") or []}


def count_handoffs(namespace: str, name: str, old: dict[str, Any] | None, new: dict[str, Any]) -> int:
    """Count the handoffs a written status records that the one before it did not (per flow group)."""
    fresh = _handoff_keys(new) - _handoff_keys(old)
    for _gen, groups in fresh:
        for group in groups:
            HANDOFFS.labels(namespace, name, group).inc()
    return len(fresh)


_expected: dict[tuple[str, str], set[str]] = {}
_gone: dict[str, None] = {}
"""Uids of resources seen deleted, oldest first (a bounded, ordered set): a refresh or a change handler that read
the resource before its deletion may finish after the deletion event, and must not bring its groups back (the
mirror-gone alert would fire for ever for a mirror removed on purpose). A resource created again under the same
name has another uid."""
_GONE_KEPT = 10_000
_expected_lock = threading.RLock()


def expect(namespace: str, name: str, status: dict[str, Any] | None, state: str | None = "running",
           uid: str | None = None) -> set[str]:
    """Set the resource's expected flow groups from a status it was given (those with an application: not
    failed over) while its spec.state is running (a paused mirror's drivers are suspended, a stopped one has
    none); the ones no longer expected are dropped. status None: the resource is gone. `uid`: the resource's, as
    read; one already seen deleted (`forget`) counts as gone."""
    groups = (status or {}).get("flowGroups") or [] if (state or "running") == "running" else []
    now = {g["name"] for g in groups if g.get("application") and g.get("name")}
    with _expected_lock:  # kopf runs handlers on several threads: the check and the write go together
        if uid is not None and uid in _gone:
            # read before its deletion: its groups were dropped then, and the name may already be a new
            # resource's (another uid), whose groups stay as they are
            return set()
        for group in _expected.get((namespace, name), set()) - now:
            EXPECTED.remove(namespace, name, group)
        for group in now:
            EXPECTED.labels(namespace, name, group).set(1)
        if now:
            _expected[(namespace, name)] = now
        else:
            _expected.pop((namespace, name), None)
    return now


def forget(namespace: str, name: str, uid: str | None) -> None:
    """The resource was deleted (or is being deleted): its groups are no longer expected, now or by a handler
    that finishes later with what it read before."""
    with _expected_lock:  # marked gone and dropped at once: no handler of the old uid can set them in between
        if uid:
            _gone[uid] = None
            while len(_gone) > _GONE_KEPT:
                del _gone[next(iter(_gone))]
        expect(namespace, name, None)
