"""The model layer (Strimzi style): a KafkaMirrorMaker2 resource in, the desired Kubernetes objects out. Pure.

Per flow group: a ConfigMap holding the
flow-group config (the job's contract), a `coordination.k8s.io/v1` Lease saying which worker generation may
mirror, and the application that runs the group. How an application is launched is behind one function,
`render_application`, chosen by `Settings.launcher` (today the Kubeflow `SparkApplication`; a native
spark-submit renderer can be added beside it).

No RBAC: the drivers run as the ServiceAccount the Helm chart provisions in every served namespace
(`Settings.driver_service_account`); the operator holds no right to create pods, ServiceAccounts, Roles or
RoleBindings (charts/sparkmirror/README.md, the threat model).

Credentials: only Secret references. Secrets are mounted as files (default) or exposed as environment
variables through `secretKeyRef`; a value never appears in a rendered object.
"""
from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparkmirror.resource.flowgroup import FlowGroupConfig

from sparkmirror.resource.plan import SECRET_MOUNT_ROOT, Plan, SecretRef, env_name, plan
from sparkmirror.resource.model import API_VERSION, KIND, KafkaMirrorMaker2
from sparkmirror.resource.names import (LEASE_HOLDER, LEASE_REVOKED, LEASE_TRANSACTIONAL_IDS, SUBMISSION_ENV,
                                        SUBMISSION_LABEL, application_name,
                                        config_map_name, lease_name, short_name, transactional_ids)
from sparkmirror.historybudget import MIB, parse_memory
from sparkmirror.sparkdefaults import DRIVER_ENV, SPARK_DEFAULTS

from .observed import ANNOTATION_LAST_GENERATION, ANNOTATION_MOVED_AT, ANNOTATION_ROLLED_BACK, Observed
from .restarts import ANNOTATION_REFUSED, ANNOTATION_RESTART
from .rollout import plan_rollout
from .rolloutplan import Plan as Rollout

CONFIG_MOUNT = "/etc/sparkmirror/flowgroup"
CONFIG_KEY = "flowgroup.yaml"
FIELD_MANAGER = "sparkmirror-operator"
SPARK_APP_API = "sparkoperator.k8s.io/v1beta2"

LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_RESOURCE = "sparkmirror.io/resource"
LABEL_FLOW_GROUP = "sparkmirror.io/flow-group"
LABEL_GENERATION = "sparkmirror.io/worker-generation"
ANNOTATION_CONFIG_HASH = "sparkmirror.io/config-hash"
RESTART_POLICY = {
    # The job's exit contract (resource/names.py EXIT_*) as far as the Kubeflow Spark operator can tell codes
    # apart (it restarts by state only): exit 0 (handed over and drained, superseded, asked to stop) completes
    # and is never resubmitted; any other exit is resubmitted after `interval x attempts` seconds (its linear
    # back-off) up to `retries` times, then the application stays FAILED and the status says so. A permanent
    # refusal (names.PERMANENT_EXIT_CODES) is read back by this operator from the failed state's message, and
    # its application removed before the next attempt (exitcontract.py).
    "type": "OnFailure",
    # 20 s, 40 s, ... 400 s apart: 70 minutes of trying in all. The first retry comes 20 s after a failure so
    # that a busy operator has read a refusal back and removed its application before it would run again.
    "onFailureRetries": 20,
    "onFailureRetryInterval": 20,
    "onSubmissionFailureRetries": 30,
    "onSubmissionFailureRetryInterval": 20,
}


@dataclass(frozen=True)
class Settings:
    """Operator-wide defaults (from the Helm chart's values through the environment)."""

    spark_image: str = "ghcr.io/sparkmirror/sparkmirror-spark:0.1.0"
    main_application_file: str = "local:///opt/sparkmirror/job.py"
    launcher: str = "spark-application"
    secrets: str = "files"  # or "env"
    metrics_port: int = 9090
    metrics_bind: str | None = None  # the drivers' default (0.0.0.0) unless set
    metrics_per_partition: bool = True  # the drivers serve per-partition families (the chart's metrics.perPartition)
    image_pull_secrets: tuple[str, ...] = ()
    # the drivers' and executors' ServiceAccount: provisioned by the chart per namespace, never by the operator
    driver_service_account: str = "sparkmirror-driver"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)
        d = cls()
        return cls(spark_image=env.get("SPARKMIRROR_SPARK_IMAGE", d.spark_image),
                   main_application_file=env.get("SPARKMIRROR_MAIN_APPLICATION_FILE", d.main_application_file),
                   launcher=env.get("SPARKMIRROR_LAUNCHER", d.launcher),
                   secrets=env.get("SPARKMIRROR_SECRETS", d.secrets),
                   metrics_port=int(env.get("SPARKMIRROR_METRICS_PORT", d.metrics_port)),
                   metrics_bind=_ip_address(env.get("SPARKMIRROR_METRICS_BIND")) or d.metrics_bind,
                   metrics_per_partition=env.get("SPARKMIRROR_METRICS_PER_PARTITION", "true").lower() != "false",
                   driver_service_account=env.get("SPARKMIRROR_DRIVER_SERVICE_ACCOUNT") or d.driver_service_account,
                   image_pull_secrets=tuple(s.strip() for s in env.get("SPARKMIRROR_IMAGE_PULL_SECRETS",
                                                                       "").split(",") if s.strip()))


def _ip_address(value: str | None) -> str | None:
    """An IP address setting, checked at start-up (the operator refuses to start) rather than per resource."""
    if value:
        import ipaddress

        try:
            ipaddress.ip_address(value)
        except ValueError:
            raise ValueError(f"SPARKMIRROR_METRICS_BIND: expected an IP address, got {value!r}") from None
    return value or None


def _per_partition(group: bool | None, settings: Settings) -> bool | None:
    """The flow group's own setting, else the operator's; on (the driver's default) is written as nothing, so a
    ConfigMap, its hash and the running worker generation stay what they were before the setting existed."""
    return None if (settings.metrics_per_partition if group is None else group) else False


@dataclass
class Rendered:
    plan: Plan
    objects: list[dict[str, Any]] = field(default_factory=list)
    rollout: Rollout | None = None


@dataclass(frozen=True)
class GroupContext:
    """What an application renderer gets for one flow group."""

    kmm2: KafkaMirrorMaker2
    config: FlowGroupConfig
    config_hash: str
    secrets: list[SecretRef]
    settings: Settings
    labels: dict[str, str]
    owner: dict[str, Any]
    executors: int | None = None  # autoscaling's executor count, over the spec's


def _labels(kmm2: KafkaMirrorMaker2, component: str, group: str | None = None) -> dict[str, str]:
    labels = {LABEL_NAME: "sparkmirror", LABEL_INSTANCE: kmm2.name, LABEL_MANAGED_BY: FIELD_MANAGER,
              LABEL_COMPONENT: component, LABEL_RESOURCE: kmm2.name}
    if group is not None:
        labels[LABEL_FLOW_GROUP] = group
    return labels


def owner_reference(kmm2: KafkaMirrorMaker2) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "name": kmm2.name, "uid": kmm2.metadata.uid or "",
            "controller": True, "blockOwnerDeletion": True}


def _meta(kmm2: KafkaMirrorMaker2, name: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": kmm2.namespace, "labels": labels,
            "ownerReferences": [owner_reference(kmm2)], **extra}


def _volume_name(secret: str) -> str:
    return short_name("secret", secret, limit=63) if len(secret) <= 55 else \
        "secret-" + hashlib.sha256(secret.encode()).hexdigest()[:16]


def _secret_mounts(ctx: GroupContext) -> tuple[list[dict], list[dict], list[dict]]:
    """(volumes, volumeMounts, env) giving the job the Secrets the config refers to, by reference."""
    volumes, mounts, env = [], [], []
    # the environment variables the config names (secrets="env": passwords; certificates stay files)
    wanted = {a.password.env for c in ctx.config.clusters if (a := c.authentication) is not None
              and a.password is not None and a.password.env}
    for ref in ctx.secrets:
        name = env_name(ref.secret, ref.key) if ref.key is not None else None
        if name in wanted and all(e["name"] != name for e in env):
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}})
    for secret in sorted({r.secret for r in ctx.secrets}):
        vol = _volume_name(secret)
        volumes.append({"name": vol, "secret": {"secretName": secret, "defaultMode": 0o440}})
        mounts.append({"name": vol, "mountPath": f"{SECRET_MOUNT_ROOT}/{secret}", "readOnly": True})
    return volumes, mounts, env


SPARK_UID = 185  # the Spark image's user
DRAIN_MARGIN_SECONDS = 80
"""A stopping driver's grace is 2 epochs plus this (driver.Driver.stop): the running epoch and 30 s, lanes carrying
on between epochs (up to an epoch and 2 s), fencing lanes an epoch left open (15 s), then the services and Spark
stop. 1 epoch + 60 s was too short on a busy node: the kubelet killed a draining driver, leaving transactions
open."""
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
# the driver's ready report names its submission, so a report from before a restart is told apart (readiness.py)
SUBMISSION_FROM_LABEL = {"name": SUBMISSION_ENV,
                         "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{SUBMISSION_LABEL}']"}}}
# the `restricted` Pod Security Standard; fsGroup makes mounted Secrets (mode 0440) readable by the job's user
POD_SECURITY = {"runAsNonRoot": True, "runAsUser": SPARK_UID, "fsGroup": SPARK_UID,
                "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsNonRoot": True}


def pod_template(container: str, ctx: GroupContext, labels: dict[str, str], volumes: list[dict],
                 mounts: list[dict], env: list[dict], ports: list[dict] | None = None) -> dict[str, Any]:
    """A Spark pod template: Spark itself applies it to the driver or executor pods, so security context,
    volumes, Secret-backed env and ports need no mutating webhook (Kubeflow's is optional; without it those
    SparkApplication fields are silently dropped)."""
    c: dict[str, Any] = {"name": container, "securityContext": CONTAINER_SECURITY, "volumeMounts": mounts}
    if env:
        c["env"] = env
    if ports:
        c["ports"] = ports
    pod_security = {**POD_SECURITY, **(ctx.kmm2.spec.spark.podSecurityContext or {})}
    return {"metadata": {"labels": labels},
            "spec": {"securityContext": pod_security, "volumes": volumes, "containers": [c]}}


def executor_cores(lanes: int, instances: int, cores: int, task_cpus: int = 1) -> int:
    """Spark's cores per executor: at least one task slot per lane. A lane is a task that holds its slot for a
    whole epoch, mostly waiting on brokers, so with fewer slots than lanes the lanes take turns: each copies
    every other epoch, and a handoff moves the later lanes' partitions an epoch after the first (kind, 2 lanes on
    one core: partitions waited 3.2-10.7 s, against 0.75 s with a slot each). The pod's CPU request stays what
    the spec says (`render_spark_application`): the slots are Spark's bookkeeping, not the node's CPU."""
    return max(cores, -(-lanes * max(1, task_cpus) // max(1, instances)))


PYTHON_WORKER_MIB = 128
"""Memory overhead per task slot the operator adds: each slot runs a lane in its own Python worker (its clients and
buffers; the soak measured a lane worker's Python heap at 87 MB), which lives in the pod beside the JVM."""
OVERHEAD_KEYS = ("spark.executor.memoryOverhead", "spark.executor.memoryOverheadFactor",
                 "spark.kubernetes.memoryOverheadFactor")


def executor_overhead(memory: str, cores: int, slots: int, spark_conf: dict[str, Any]) -> str | None:
    """The executor pod's memory overhead when the operator gave it more slots than the spec's cores (None: Spark's
    own default stands): Spark's default for a Python application on Kubernetes (40% of the executor's memory, at
    least 384 MiB) plus a Python worker's allowance per added slot. A user's overhead setting wins."""
    if slots <= cores or any(k in spark_conf for k in OVERHEAD_KEYS):
        return None
    try:
        mib = parse_memory(memory) // MIB
    except ValueError:
        return None  # the resource's own pattern admits it; Spark will say what it makes of it
    return f"{max(384, int(0.4 * mib)) + (slots - cores) * PYTHON_WORKER_MIB}m"


def render_spark_application(ctx: GroupContext) -> list[dict[str, Any]]:
    """The Kubeflow Spark operator's SparkApplication for one flow group."""
    kmm2, spark = ctx.kmm2, ctx.kmm2.spec.spark
    group = next((g for g in kmm2.spec.flowGroups or [] if g.name == ctx.config.name), None)
    executor = group.executor if group is not None and group.executor is not None else spark.executor
    gen = ctx.config.worker.generation
    name = application_name(kmm2.name, ctx.config.name, gen)
    cm = config_map_name(kmm2.name, ctx.config.name, gen)
    volumes, secret_mounts, env = _secret_mounts(ctx)
    volumes = [{"name": "flowgroup", "configMap": {"name": cm}}, *volumes]
    mounts = [{"name": "flowgroup", "mountPath": CONFIG_MOUNT, "readOnly": True}, *secret_mounts]
    pod_labels = {**ctx.labels, LABEL_GENERATION: str(ctx.config.worker.generation)}
    annotations = {ANNOTATION_CONFIG_HASH: ctx.config_hash}
    sa = ctx.settings.driver_service_account

    def pod(container: str, cores: int, memory: str, core_request: str | None, core_limit: str | None,
            ports: list[dict] | None = None, own_env: list[dict] | None = None) -> dict[str, Any]:
        template = pod_template(container, ctx, pod_labels, volumes, mounts, [*env, *(own_env or [])], ports)
        p: dict[str, Any] = {"cores": cores, "memory": memory, "labels": pod_labels, "annotations": annotations,
                             "serviceAccount": sa, "template": template}
        if core_request:
            p["coreRequest"] = core_request
        if core_limit:
            p["coreLimit"] = core_limit
        return p

    # the JVMs' options must be set here: the driver pod's JVM is up before the job's own session settings apply
    spark_conf = {**SPARK_DEFAULTS, "spark.sql.streaming.stopGracefullyOnShutdown": "true", **spark.sparkConf}
    instances = ctx.executors or executor.instances
    lanes = sum(ctx.config.lanes_of(m) for m in ctx.config.mirrors)
    task_cpus = str(spark_conf.get("spark.task.cpus", "1"))
    slots = executor_cores(lanes, instances, executor.cores, int(task_cpus) if task_cpus.isdigit() else 1)
    # more slots than the spec's cores ask the scheduler for no more CPU: the pod requests what the spec says
    core_request = executor.coreRequest or (str(executor.cores) if slots != executor.cores else None)
    overhead = executor_overhead(executor.memory, executor.cores, slots, spark_conf)
    app: dict[str, Any] = {
        "apiVersion": SPARK_APP_API,
        "kind": "SparkApplication",
        "metadata": _meta(kmm2, name, pod_labels, annotations=annotations),
        "spec": {
            "type": "Python",
            "pythonVersion": "3",
            "mode": "cluster",
            "image": spark.image or ctx.settings.spark_image,
            "mainApplicationFile": ctx.settings.main_application_file,
            "arguments": ["--config", f"{CONFIG_MOUNT}/{CONFIG_KEY}"],
            "sparkVersion": spark.sparkVersion,
            "sparkConf": spark_conf,
            "restartPolicy": dict(RESTART_POLICY),
            "suspend": kmm2.spec.state == "paused",
            # the job's driver serves Prometheus metrics and its progress view on the metrics port
            "driver": pod(DRIVER_CONTAINER, spark.driver.cores, spark.driver.memory, spark.driver.coreRequest,
                          spark.driver.coreLimit, [{"name": "metrics", "containerPort": ctx.settings.metrics_port,
                                                    "protocol": "TCP"}],
                          [SUBMISSION_FROM_LABEL, *({"name": k, "value": v} for k, v in DRIVER_ENV.items())]),
            "executor": {**pod(EXECUTOR_CONTAINER, slots, executor.memory, core_request, executor.coreLimit),
                         "instances": instances,
                         **({"memoryOverhead": overhead} if overhead else {})},
        },
    }
    # a stopping driver drains (see DRAIN_MARGIN_SECONDS)
    app["spec"]["driver"]["template"]["spec"]["terminationGracePeriodSeconds"] = \
        2 * int(ctx.config.epochSeconds) + DRAIN_MARGIN_SECONDS
    if spark.imagePullPolicy:
        app["spec"]["imagePullPolicy"] = spark.imagePullPolicy
    pull_secrets = list(dict.fromkeys([*ctx.settings.image_pull_secrets, *spark.imagePullSecrets]))
    if pull_secrets:
        app["spec"]["imagePullSecrets"] = pull_secrets
    return [app]


APPLICATION_RENDERERS: dict[str, Callable[[GroupContext], list[dict[str, Any]]]] = {
    "spark-application": render_spark_application,
}


def render_application(ctx: GroupContext) -> list[dict[str, Any]]:
    """The objects that run one flow group, for the configured launcher."""
    try:
        renderer = APPLICATION_RENDERERS[ctx.settings.launcher]
    except KeyError:
        raise ValueError(f"unknown launcher {ctx.settings.launcher!r}; known: {sorted(APPLICATION_RENDERERS)}")
    return renderer(ctx)


def render_lease(kmm2: KafkaMirrorMaker2, group: str, holder: FlowGroupConfig | None, moved_at: str | None,
                 settings: Settings, rollback: dict[str, Any] | None = None,
                 last_generation: int = 0, refused: dict[str, Any] | None = None,
                 revoked: str | None = None) -> dict[str, Any]:
    """The flow group's Lease: which worker generation may copy (none yet: a standby waits), since when, the
    transactional ids that generation's lanes hold (what a later generation fences), the last rollback, what a
    Lease moved back revoked (`names.LEASE_REVOKED`) and the highest generation number given out (never given
    out again)."""
    annotations: dict[str, str] = {}
    if revoked:
        annotations[LEASE_REVOKED] = revoked
    if last_generation:
        annotations[ANNOTATION_LAST_GENERATION] = str(last_generation)
    if refused:
        annotations[ANNOTATION_REFUSED] = json.dumps(refused, separators=(",", ":"), sort_keys=True)
    if rollback:
        annotations[ANNOTATION_ROLLED_BACK] = json.dumps(rollback, separators=(",", ":"), sort_keys=True)
    spec: dict[str, Any] = {"leaseDurationSeconds": kmm2.spec.upgrade.leaseDurationSeconds}
    if holder is not None:
        gen = holder.worker.generation
        annotations[LEASE_HOLDER] = str(gen)
        annotations[LEASE_TRANSACTIONAL_IDS] = json.dumps(
            transactional_ids(holder.resource, holder.name, holder.lane_routes()), separators=(",", ":"))
        spec["holderIdentity"] = application_name(kmm2.name, holder.name, gen)
    if moved_at:
        annotations[ANNOTATION_MOVED_AT] = moved_at
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": _meta(kmm2, lease_name(kmm2.name, group), _labels(kmm2, "lease", group),
                              annotations=annotations),
            "spec": spec}


def render(resource: dict[str, Any] | KafkaMirrorMaker2, settings: Settings | None = None, *,
           secret_keys: Callable[[str], list[str] | None] | None = None, observed: Observed | None = None,
           now_ms: int | None = None, rolled_back: dict[str, Any] | None = None,
           failed_over: frozenset[str] = frozenset(), scale: dict[str, tuple[int, int]] | None = None) -> Rendered:
    """All desired objects of a resource. With errors in `rendered.plan.errors`, no objects are rendered;
    with `spec.state: stopped`, no applications are (ConfigMaps and Leases stay, so a restart resumes);
    nor for a flow group carrying a mirror in `failed_over` (status.failover: it copies no more, see failover.py).

    `observed` (the resource's ConfigMaps, applications and Leases): which worker generations run, and the
    handoff in progress (rollout.py). Without it, every flow group renders as a first generation.

    `scale` (status.autoscaling): flow group -> (lanes per mirror, executors) over the spec's; a change makes a
    new generation like a `parallelism` change does, taken over by handoff."""
    import time

    settings = settings or Settings()
    p = plan(resource, secrets=settings.secrets, secret_root=SECRET_MOUNT_ROOT, secret_keys=secret_keys)
    out = Rendered(plan=p)
    if p.errors or p.resource is None:
        return out
    kmm2 = p.resource
    scale = {g.name: scale[g.name] for g in p.groups if g.name in scale and _differs(kmm2, g, scale[g.name])} \
        if scale else {}
    desired = [_with_application(kmm2, _scaled(cfg, scale.get(cfg.name)).model_copy(update={
        "metricsPort": settings.metrics_port, "metricsBind": settings.metrics_bind,
        "metricsPerPartition": _per_partition(cfg.metricsPerPartition, settings)}), settings,
        scale.get(cfg.name, (0, None))[1]) for cfg in p.groups]
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    observed = observed or Observed()
    rollout = plan_rollout(desired, observed, kmm2.spec.upgrade, now_ms=now_ms,
                           restart=kmm2.metadata.annotations.get(ANNOTATION_RESTART, ""),
                           rolled_back=observed.rollback() or rolled_back,
                           state=kmm2.spec.state, failed_over=failed_over)
    out.rollout = rollout
    wanted_apps = {c.name: c.worker.application for c in desired}
    for cfg in rollout.workers:
        text = cfg.to_yaml()
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        labels = {**_labels(kmm2, "flow-group", cfg.name), LABEL_GENERATION: str(cfg.worker.generation)}
        cm_name = config_map_name(kmm2.name, cfg.name, cfg.worker.generation)
        out.objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": _meta(kmm2, cm_name, labels,
                                              annotations={ANNOTATION_CONFIG_HASH: digest}),
                            "data": {CONFIG_KEY: text}})
        if kmm2.spec.state == "stopped" or failed_over & {m.name for m in cfg.mirrors}:
            continue
        if (cfg.name, cfg.worker.generation) in rollout.no_application:  # refused: never started again
            continue
        started = observed.workers.get(cfg.name, {}).get(cfg.worker.generation) if observed is not None else None
        if started is not None and started.app is not None and \
                cfg.worker.application != wanted_apps.get(cfg.name, cfg.worker.application):
            # a generation runs with the settings it started with (the next one brings the new settings, and
            # may be rolled back): its application is kept as it is
            out.objects.append(_as_applied(started.app))
            continue
        secrets = _group_secrets(p, text)
        out.objects += render_application(GroupContext(kmm2, cfg, digest, secrets, settings,
                                                       _labels(kmm2, "flow-group", cfg.name),
                                                       owner_reference(kmm2), scale.get(cfg.name, (0, None))[1]))
    by_gen = {(c.name, c.worker.generation): c for c in rollout.workers}
    for group, gen in sorted(rollout.holders.items()):
        holder = None if gen is None else by_gen.get((group, gen)) or next(
            (c for c in rollout.workers if c.worker.generation == gen), None)
        moved_at = str(now_ms) if group in rollout.moved else \
            (observed.annotation(group, ANNOTATION_MOVED_AT) if observed is not None else None)
        # a group a split or merge superseded: its Lease names the later generation (of another group)
        out.objects.append(render_lease(kmm2, group, holder, moved_at, settings, rollout.rollback,
                                        rollout.last_generation, rollout.refused.get(group),
                                        rollout.revoked.get(group)))
    out.objects = copy.deepcopy(out.objects)  # no shared sub-dicts
    return out


def _as_applied(app: dict[str, Any]) -> dict[str, Any]:
    """An observed application as this operator applies it: its spec and our metadata, nothing the server set."""
    meta = app["metadata"]
    return {"apiVersion": app["apiVersion"], "kind": app["kind"],
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations", "ownerReferences")
                         if k in meta},
            "spec": app["spec"]}


def _differs(kmm2: KafkaMirrorMaker2, cfg: FlowGroupConfig, scale: tuple[int, int]) -> bool:
    """Whether autoscaling's scale is not the spec's: the spec's own renders as it always did (same hash, same
    generation), so turning autoscaling on starts no generation until a decision changes something."""
    group = next((g for g in kmm2.spec.flowGroups or [] if g.name == cfg.name), None)
    executor = group.executor if group is not None and group.executor is not None else kmm2.spec.spark.executor
    return executor.instances != scale[1] or any(cfg.lanes_of(m) != scale[0] for m in cfg.mirrors)


def _scaled(cfg: FlowGroupConfig, scale: tuple[int, int] | None) -> FlowGroupConfig:
    """Every mirror of the group with autoscaling's lanes (a mirror's own `lanes` would win over the group's)."""
    if scale is None:
        return cfg
    return cfg.model_copy(update={"lanes": scale[0],
                                  "mirrors": [m.model_copy(update={"lanes": scale[0]}) for m in cfg.mirrors]})


def _with_application(kmm2: KafkaMirrorMaker2, cfg: FlowGroupConfig, settings: Settings,
                      executors: int | None = None) -> FlowGroupConfig:
    """The config with the digest of what its application runs with: the image, resources and Spark settings
    (not `state`: pausing suspends the same application), so such a change rolls over by handoff too."""
    group = next((g for g in kmm2.spec.flowGroups or [] if g.name == cfg.name), None)
    what = {"spark": kmm2.spec.spark.model_dump(mode="json"),
            "executor": group.executor.model_dump(mode="json") if group is not None and group.executor else None,
            "settings": {"image": settings.spark_image, "file": settings.main_application_file,
                         "launcher": settings.launcher, "secrets": settings.secrets,
                         "serviceAccount": settings.driver_service_account,
                         "pullSecrets": list(settings.image_pull_secrets)}}
    if executors:  # only when scaled: the digest of every unscaled group stays what it was
        what["executors"] = executors
    digest = hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]
    return cfg.model_copy(update={"worker": cfg.worker.model_copy(update={"application": digest})})


def _group_secrets(p: Plan, config_text: str) -> list[SecretRef]:
    """The Secret references of the clusters this group talks to (a group mounts only what it uses)."""
    return [r for r in dict.fromkeys(p.secrets) if f"{SECRET_MOUNT_ROOT}/{r.secret}/" in config_text
            or (r.key and env_name(r.secret, r.key) in config_text)]
