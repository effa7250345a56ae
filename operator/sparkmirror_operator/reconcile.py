"""The assembly operator: read, call the pure model layer, apply, prune, observe, and compute the status.

Everything that can go wrong for one resource ends up as a Problem on its status (a condition naming the
field or object); nothing here raises for a bad resource, so the operator keeps serving the others.
"""
from __future__ import annotations

import base64
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from sparkmirror.resource.flowgroup import SecretUnreadable, secret_text
from sparkmirror.resource.model import KIND
from sparkmirror.resource.names import application_name, lease_name
from sparkmirror.clientcheck import check_client_keys
from sparkmirror.resource.plan import Plan, env_name, plan
from .kubeapi import OWNED_KINDS, KubeApi
from . import failover
from .lag import SECRET_REF_ROOT, GroupLag, group_lag, secret_resolver
from .render import CONFIG_KEY, LABEL_COMPONENT, LABEL_FLOW_GROUP, LABEL_GENERATION, LABEL_RESOURCE, Settings, render
from .renewal import RenewalClock
from .observed import Observed, Worker
from .scaling import Autoscaler
from . import scaling
from .status import Problem, build_status

log = logging.getLogger(__name__)
SECRET_REASONS = ("SecretMissing", "SecretInvalid")


@dataclass
class Event:
    type: str  # Normal / Warning
    reason: str
    message: str


@dataclass
class Result:
    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    acted: bool = False  # the rendered objects were applied (its events are news, not a refresh's repetition)


class SecretCache:
    """The Secrets one reconcile reads (keys for certificate patterns, values for the lag clients)."""

    def __init__(self, api: KubeApi, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self._cache: dict[str, dict[str, Any] | None] = {}
        self.errors: dict[str, str] = {}  # Secrets that could not be read (e.g. 403): name -> why

    def get(self, name: str) -> dict[str, Any] | None:
        if name not in self._cache:
            try:
                self._cache[name] = self.api.get("Secret", self.namespace, name)
            except client.ApiException as e:  # lands on the status (secret_problems), not in a handler crash
                self._cache[name], self.errors[name] = None, f"{e.status} {e.reason}"
        return self._cache[name]

    def keys(self, name: str) -> list[str] | None:
        s = self.get(name)
        return None if s is None else sorted((s.get("data") or {}).keys())

    def value(self, name: str, key: str) -> str:
        """The key's text; KeyError when missing, SecretUnreadable (naming Secret and key) when not UTF-8."""
        s = self.get(name)
        if s is None:
            raise KeyError(f"{self.namespace}/{name} not found")
        data = s.get("data") or {}
        if key not in data:
            raise KeyError(f"{self.namespace}/{name} has no key {key!r}")
        return secret_text(base64.b64decode(data[key]), f"Secret {self.namespace}/{name} key {key!r}")

    def is_text(self, name: str, key: str) -> bool:
        try:
            self.value(name, key)
            return True
        except SecretUnreadable:
            return False


def _ident(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


class Reconciler:
    def __init__(self, api: KubeApi, settings: Settings | None = None, lag_timeout: float = 5.0,
                 refresh_s: float | None = None) -> None:
        self.api = api
        self.settings = settings or Settings()
        self.lag_timeout = lag_timeout
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self.renewals = RenewalClock()  # when each Lease's renewal was seen, on this operator's clock
        # spec.autoscaling: the samples of each flow group (one a status refresh, `refresh_s`), the decisions
        self.autoscaler = Autoscaler() if refresh_s is None else Autoscaler(refresh_s=refresh_s)
        self._applied_scale: dict[tuple[str, str], scaling.Scale] = {}  # the scale last applied, per resource

    def _lock(self, namespace: str, name: str) -> threading.Lock:
        """One acting reconcile of a resource at a time: handlers of the resource, of its applications and of
        its Leases run concurrently, and two reconciles acting on different views would prune each other's
        worker generations."""
        with self._locks_lock:
            return self._locks.setdefault((namespace, name), threading.Lock())

    # ---- observing ------------------------------------------------------------------------------------
    def observe(self, namespace: str, name: str) -> Observed:
        """The worker generations of a resource: one ConfigMap per generation (what it runs), its application,
        and each flow group's Lease (which generation copies)."""
        from sparkmirror.resource.flowgroup import FlowGroupConfig

        obs = Observed()
        for cm in self.api.list("ConfigMap", namespace, f"{LABEL_RESOURCE}={name},{LABEL_COMPONENT}=flow-group"):
            try:
                cfg = FlowGroupConfig.from_yaml((cm.get("data") or {})[CONFIG_KEY])
            except (KeyError, ValueError) as e:  # not ours to run; the next apply rewrites it
                log.warning("%s/%s: ConfigMap %s is not a flow-group config: %s", namespace, name,
                            cm["metadata"]["name"], str(e).splitlines()[0])
                continue
            obs.workers.setdefault(cfg.name, {})[cfg.worker.generation] = Worker(cfg)
        for app in self.api.list("SparkApplication", namespace, f"{LABEL_RESOURCE}={name}"):
            labels = app["metadata"].get("labels") or {}
            worker = obs.workers.get(labels.get(LABEL_FLOW_GROUP, ""), {}).get(int(labels.get(LABEL_GENERATION, 1)))
            if worker is not None:
                worker.app = app
        for lease in self.api.list("Lease", namespace, f"{LABEL_RESOURCE}={name}"):
            obs.leases[(lease["metadata"].get("labels") or {}).get(LABEL_FLOW_GROUP, "")] = lease
        obs.renewal_ages_ms = self.renewals.ages_ms(f"{namespace}/{name}", obs.leases)
        return obs

    def secret_problems(self, p: Plan, secrets: SecretCache) -> list[Problem]:
        out = []
        for ref in dict.fromkeys(p.secrets):
            s = secrets.get(ref.secret)
            if ref.secret in secrets.errors:
                out.append(Problem("SecretUnreadable", f"Secret {secrets.namespace}/{ref.secret} referenced by "
                                                       f"{ref.field} cannot be read: {secrets.errors[ref.secret]}"))
            elif s is None:
                out.append(Problem("SecretMissing", f"Secret {secrets.namespace}/{ref.secret} referenced by "
                                                    f"{ref.field} not found"))
            elif ref.key is not None and ref.key not in (s.get("data") or {}):
                out.append(Problem("SecretMissing", f"Secret {secrets.namespace}/{ref.secret} referenced by "
                                                    f"{ref.field} has no key {ref.key!r}"))
            elif ref.key is not None and not secrets.is_text(ref.secret, ref.key):
                out.append(Problem("SecretInvalid", f"Secret {secrets.namespace}/{ref.secret} referenced by "
                                                    f"{ref.field}: key {ref.key!r} is not UTF-8 text (a password, "
                                                    "certificate or key must be)"))
            elif ref.key is None and not secrets.keys(ref.secret):
                out.append(Problem("SecretMissing", f"Secret {secrets.namespace}/{ref.secret} referenced by "
                                                    f"{ref.field} has no key matching {ref.pattern!r}"))
        return list(dict.fromkeys(out))

    @staticmethod
    def client_plan(body: dict[str, Any], secrets: SecretCache) -> tuple[Plan, dict[str, tuple[str, str]]]:
        """The plan for the operator's own Kafka clients: secrets as references `secret_resolver` reads in
        memory (environment variable name -> (Secret, key) in the second part)."""
        p = plan(body, secrets="env", secret_root=SECRET_REF_ROOT, secret_keys=secrets.keys)
        return p, {env_name(r.secret, r.key): (r.secret, r.key) for r in p.secrets if r.key}

    def lags(self, body: dict[str, Any], secrets: SecretCache) -> dict[str, GroupLag]:
        p, env_refs = self.client_plan(body, secrets)
        return {cfg.name: group_lag(cfg, secrets.value, env_refs, self.lag_timeout, p.cluster_fields)
                for cfg in p.groups}

    def failover(self, body: dict[str, Any], secrets: SecretCache, result: Result) -> list[dict[str, Any]]:
        """spec.failover acted on (failover.py); status.failover after it. Called under the resource's lock: the
        records are read fresh from the API server and written back at once, before anything is pruned, so a
        reconcile waiting for the lock with an older view does not run the same failover again."""
        meta = body["metadata"]
        fresh = self.api.get(KIND, meta["namespace"], meta["name"]) or body
        records = list((fresh.get("status") or {}).get("failover") or [])
        p, env_refs = self.client_plan(body, secrets)
        if p.errors or not any(failover.pending(p, records)):
            return records
        outcome = failover.act(p, records, secret_resolver(secrets.value, env_refs))
        result.events += [Event(t, reason, m) for t, reason, m in outcome.events]
        if outcome.records != records:
            try:
                self.api.patch_status(KIND, meta["namespace"], meta["name"], {"failover": outcome.records})
            except client.ApiException as e:  # the handler's own status write carries them too
                log.warning("%s/%s: status.failover not written yet: %s %s", meta["namespace"], meta["name"],
                            e.status, e.reason)
        return outcome.records

    # ---- acting ---------------------------------------------------------------------------------------
    def reconcile(self, body: dict[str, Any], *, apply: bool = True, with_lag: bool = False) -> Result:
        """`apply=False` (a status refresh) acts only when autoscaling, deciding from the lag read (`with_lag`),
        changes the scale or the scale decided was not applied yet by this operator."""
        meta = body["metadata"]
        decides = with_lag and scaling.spec_of(body) is not None
        if not apply and not decides:  # a status refresh acts on nothing: it need not wait for the others
            return self._reconcile(body, apply=apply, with_lag=with_lag)
        with self._lock(meta["namespace"], meta["name"]):
            return self._reconcile(body, apply=apply, with_lag=with_lag, decides=decides)

    def _reconcile(self, body: dict[str, Any], *, apply: bool, with_lag: bool, decides: bool = False) -> Result:
        meta = body["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        secrets = SecretCache(self.api, namespace)
        observed = self.observe(namespace, name)
        old_status = body.get("status") or {}
        result = Result(status={})
        records = list(old_status.get("failover") or [])
        if apply:  # before rendering: a mirror failed over now has its applications removed in this apply
            records = self.failover(body, secrets, result)
        problems: list[Problem] = failover.problems(records)
        lags = None
        if with_lag:  # before rendering: autoscaling decides from it what the flow groups run with
            lags = self.lags(body, secrets)
        scaled = self._autoscale(body, lags, old_status) if apply or decides else scaling.kept(body)
        key = (namespace, name)
        if decides and not apply and (scaled.events or self._applied_scale.get(key) != scaled.scale):
            apply = True  # a new scale (or one a failed apply left unapplied): through the handoff now
        rendered = render(body, self.settings, secret_keys=secrets.keys, observed=observed,
                          rolled_back=old_status.get("rollback"), failed_over=failover.stopping(records),
                          scale=scaled.scale)
        p = rendered.plan
        if not p.errors:
            check_client_keys(p)  # librdkafka's own word on each client setting: a refusal is never applied
        if p.errors:
            result.events.append(Event("Warning", "InvalidSpec", "; ".join(str(e) for e in p.errors)))
        else:
            problems += self.secret_problems(p, secrets)
            if apply and p.unsupported:
                result.events.append(Event("Warning", "UnsupportedConfig",
                                           "not supported, ignored: " + ", ".join(p.unsupported)))
            if apply:
                try:
                    if rendered.rollout is not None:
                        self._resubmit(namespace, name, rendered.rollout.resubmit, result)
                    self._apply(body, rendered.objects, result)
                    if rendered.rollout is not None:
                        self._drop_stale_marks(namespace, name, rendered.rollout.stale_marks, result)
                    result.acted, self._applied_scale[key] = True, scaled.scale
                except client.ApiException as e:
                    problems.append(Problem("ApplyFailed", f"{e.status} {e.reason}: {_api_message(e)}"))
        if p.errors:
            lags = None
        if lags is not None and not p.errors:  # stopped or paused too: the lag then says how far behind it falls
            for g, lag in lags.items():
                if lag.error and lag.reason not in SECRET_REASONS:  # secret_problems said it already
                    problems.append(Problem(lag.reason or "LagUnknown", lag.error))
        rollout = rendered.rollout
        if apply and rollout is not None:
            seen = {(h.get("toGeneration"), tuple(h.get("toFlowGroups") or [])) for h in old_status.get("handoffs") or []}
            for h in rollout.handoffs:
                if (h["toGeneration"], tuple(h["toFlowGroups"])) in seen:
                    continue
                result.events.append(Event("Normal", "HandedOver", f"generation {h['toGeneration']} "
                                           f"({', '.join(h['toFlowGroups'])}) took over from generation "
                                           f"{h['fromGeneration']} in {h['takeoverMs']} ms"))
            if rollout.rollback and rollout.rollback != old_status.get("rollback"):
                reason = "HandoffRolledBack" if rollout.rollback.get("leaseMovedBack") else "RolledBack"
                result.events.append(Event("Warning", reason, rollout.rollback["reason"]))
        apps: dict[str, dict[str, Any] | None] = {}
        if rollout is not None:
            latest = {c.name: c.worker.generation for c in sorted(rollout.workers, key=lambda c: c.worker.generation)}
            for g, gen in {**latest, **{g: c.worker.generation for g, c in rollout.running.items()}}.items():
                worker = observed.workers.get(g, {}).get(gen)
                apps[g] = worker.app if worker is not None else None
        # a refresh without apply has not acted on a newer spec yet: it keeps the generation last acted on
        old_generation = (body.get("status") or {}).get("observedGeneration")
        generation = meta.get("generation") if apply or old_generation is None else old_generation
        result.status = build_status(name=name, generation=generation, plan=p, apps=apps, lags=lags,
                                     problems=problems, old=body.get("status"), rollout=rollout,
                                     failover=records, failed_over=failover.failed_over_groups(p, records),
                                     failover_condition=None if p.errors else failover.condition(p, records))
        result.status["autoscaling"] = scaled.status
        result.events += [Event(t, reason, m) for t, reason, m in scaled.events]
        return result

    def _autoscale(self, body: dict[str, Any], lags: dict[str, GroupLag] | None,
                   old_status: dict[str, Any]) -> scaling.Step:
        """Decide with this refresh's lag (scaling.py); without it, keep the scale the status records. Called
        under the resource's lock: the recorded scale is read fresh (a handler's older view would render the
        scale before the last decision), and a change is written to status.autoscaling before it is rendered,
        so no later reconcile renders the old scale again."""
        meta = body["metadata"]
        if scaling.spec_of(body) is None:
            return scaling.Step()
        fresh = self.api.get(KIND, meta["namespace"], meta["name"]) or body
        body = {**body, "status": {**old_status, "autoscaling": scaling.recorded(fresh)}}
        if lags is None:
            return scaling.kept(body)
        p = plan(body)
        if p.errors or p.resource is None:
            return scaling.kept(body)
        upgrading = any(c.get("type") == "Upgrading" and c.get("status") == "True"
                        for c in old_status.get("conditions") or [])
        step = self.autoscaler.step(body, p.resource, p.groups, lags,
                                    busy="a worker-generation handoff is under way" if upgrading else None)
        if step.events:
            try:
                self.api.patch_status(KIND, meta["namespace"], meta["name"], {"autoscaling": step.status})
            except client.ApiException as e:  # not recorded: not acted on; the next refresh decides again
                log.warning("%s/%s: status.autoscaling not written, scale kept: %s %s", meta["namespace"],
                            meta["name"], e.status, e.reason)
                return scaling.kept(body)
        return step

    def _apply(self, body: dict[str, Any], objects: list[dict[str, Any]], result: Result) -> None:
        meta = body["metadata"]
        namespace, name, uid = meta["namespace"], meta["name"], meta.get("uid")
        for obj in objects:
            obj["metadata"]["ownerReferences"][0]["uid"] = uid
            before = self.api.get(obj["kind"], namespace, obj["metadata"]["name"])
            after = self.api.apply(obj)
            if before is None:
                result.applied.append(_ident(obj))
            elif before["metadata"].get("resourceVersion") != after["metadata"].get("resourceVersion"):
                result.applied.append(_ident(obj) + " (changed)")
        desired = {(o["kind"], o["metadata"]["name"]) for o in objects}
        for kind in reversed(OWNED_KINDS):
            for obj in self.api.list(kind, namespace, f"{LABEL_RESOURCE}={name}"):
                owners = obj["metadata"].get("ownerReferences") or []
                if (kind, obj["metadata"]["name"]) in desired or not any(o.get("uid") == uid for o in owners):
                    continue
                if self.api.delete(kind, namespace, obj["metadata"]["name"]):
                    result.deleted.append(f"{kind}/{obj['metadata']['name']}")
        if result.applied:
            result.events.append(Event("Normal", "Applied", "applied " + ", ".join(result.applied)))
        if result.deleted:
            result.events.append(Event("Normal", "Deleted", "deleted " + ", ".join(result.deleted)))

    def _resubmit(self, namespace: str, name: str, apps: list[tuple[str, int]], result: Result) -> None:
        """Remove the applications of generations that exited 0 unasked (rollout.Plan.resubmit): the apply
        right after creates them again (a completed SparkApplication is never run again by the Spark operator)."""
        for group, gen in apps:
            app = application_name(name, group, gen)
            if self.api.delete("SparkApplication", namespace, app):
                result.events.append(Event("Normal", "Resubmitted", f"SparkApplication {app} exited 0 while its "
                                           f"Lease names it (nothing took it over): submitted again"))

    def _drop_stale_marks(self, namespace: str, name: str, stale: dict[str, list[str]], result: Result) -> None:
        """The drivers' reports of generations that no longer run (rollout.Plan.stale_marks), off the Leases
        kept: reports never pile up, and one of a gone generation never stands for a later one."""
        if not stale:
            return
        kept = {o["metadata"]["name"] for o in self.api.list("Lease", namespace, f"{LABEL_RESOURCE}={name}")}
        for group, keys in sorted(stale.items()):
            lease = lease_name(name, group)
            if lease in kept and self.api.drop_annotations("Lease", namespace, lease, keys):
                result.applied.append(f"Lease/{lease} (dropped {', '.join(keys)})")


def _api_message(e: client.ApiException) -> str:
    import json

    try:
        return json.loads(e.body).get("message", "")[:500]
    except (TypeError, ValueError):
        return str(e.body)[:500]
