"""The model layer: resource YAML in, desired objects YAML out (golden files in data/render/).

Regenerate the expected files after an intended change with SPARKMIRROR_UPDATE_GOLDEN=1 and review the diff.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.sparkdefaults import SPARK_DEFAULTS
from sparkmirror_operator.render import Settings, render

DATA = Path(__file__).parent / "data" / "render"
CASES = sorted(p.name.removesuffix(".input.yaml") for p in DATA.glob("*.input.yaml"))


def rendered(case: str) -> list[dict]:
    return render(yaml.safe_load((DATA / f"{case}.input.yaml").read_text()), Settings()).objects


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    text = yaml.safe_dump_all(rendered(case), sort_keys=False)
    expected = DATA / f"{case}.expected.yaml"
    if os.environ.get("SPARKMIRROR_UPDATE_GOLDEN") == "1":
        expected.write_text(text)
    assert text == expected.read_text()


@pytest.mark.parametrize("case", CASES)
def test_owner_references_and_labels_on_everything(case: str) -> None:
    src = yaml.safe_load((DATA / f"{case}.input.yaml").read_text())
    for obj in rendered(case):
        meta = obj["metadata"]
        assert meta["namespace"] == src["metadata"]["namespace"]
        (owner,) = meta["ownerReferences"]
        assert owner["uid"] == src["metadata"]["uid"] and owner["controller"] is True
        assert meta["labels"]["sparkmirror.io/resource"] == src["metadata"]["name"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "sparkmirror-operator"
        assert len(meta["name"]) <= 63


def test_two_groups_content() -> None:
    objs = rendered("two-groups-scram")
    kinds = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert kinds == [("ConfigMap", "dc-mirror-east-orders-config"), ("SparkApplication", "dc-mirror-east-orders"),
                     ("ConfigMap", "dc-mirror-west-config"), ("SparkApplication", "dc-mirror-west"),
                     ("Lease", "dc-mirror-east-orders"), ("Lease", "dc-mirror-west")]
    apps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "SparkApplication"}
    east = apps["dc-mirror-east-orders"]["spec"]
    assert east["suspend"] is True and east["restartPolicy"] == {
        "type": "OnFailure", "onFailureRetries": 20, "onFailureRetryInterval": 20, "onSubmissionFailureRetries": 30,
        "onSubmissionFailureRetryInterval": 20}  # exit 0 is never resubmitted (the exit contract)
    assert east["executor"]["instances"] == 3 and apps["dc-mirror-west"]["spec"]["executor"]["instances"] == 2
    # each group mounts exactly the Secrets its clusters refer to
    assert sorted(v["secret"]["secretName"] for v in _template(east, "driver")["volumes"] if "secret" in v) == \
        ["central-ca", "east-user", "mirror-user"]
    west = apps["dc-mirror-west"]["spec"]
    assert sorted(v["secret"]["secretName"] for v in _template(west, "executor")["volumes"] if "secret" in v) == \
        ["central-ca", "mirror-user"]
    cms = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    cfg = FlowGroupConfig.from_yaml(cms["dc-mirror-east-orders-config"]["data"]["flowgroup.yaml"])
    assert cfg.mirrors[0].lanes == 8 and cfg.lanes == 4
    assert cfg.cluster("central").authentication.password.file == "/etc/sparkmirror/secrets/mirror-user/password"
    assert cfg.worker.leaseName == "dc-mirror-east-orders"
    # no RBAC rendered: drivers and executors run as the chart's account (charts/sparkmirror/README.md)
    assert {o["kind"] for o in objs} == {"ConfigMap", "SparkApplication", "Lease"}
    for app in apps.values():
        assert app["spec"]["driver"]["serviceAccount"] == app["spec"]["executor"]["serviceAccount"] == \
            "sparkmirror-driver"
    mine = render(yaml.safe_load((DATA / "two-groups-scram.input.yaml").read_text()),
                  Settings(driver_service_account="smm-driver")).objects
    assert {o["spec"]["driver"]["serviceAccount"] for o in mine if o["kind"] == "SparkApplication"} == {"smm-driver"}
    assert Settings.from_env({"SPARKMIRROR_DRIVER_SERVICE_ACCOUNT": "x-driver"}).driver_service_account == "x-driver"


def test_stopped_renders_no_applications_and_errors_render_nothing() -> None:
    src = yaml.safe_load((DATA / "two-groups-scram.input.yaml").read_text())
    src["spec"]["state"] = "stopped"
    kinds = {o["kind"] for o in render(src).objects}
    assert "SparkApplication" not in kinds and "ConfigMap" in kinds
    src["spec"]["mirrors"][1]["topicsPattern"] = "(bad"
    out = render(src)
    assert out.objects == [] and [p.field for p in out.plan.errors] == ["spec.mirrors[1].topicsPattern"]


def test_env_secrets_use_secret_key_refs() -> None:
    src = yaml.safe_load((DATA / "two-groups-scram.input.yaml").read_text())
    objs = render(src, Settings(secrets="env")).objects
    app = next(o for o in objs if o["kind"] == "SparkApplication")
    assert {"name": "SPARKMIRROR_SECRET_MIRROR_USER_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": "mirror-user", "key": "password"}}} in _container(app, "driver")["env"]
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    cfg = FlowGroupConfig.from_yaml(cm["data"]["flowgroup.yaml"])
    assert cfg.cluster("central").authentication.password.env == "SPARKMIRROR_SECRET_MIRROR_USER_PASSWORD"
    # only what the config reads from the environment: certificates and keys stay mounted files; the driver
    # also gets its submission id from its pod's label (its ready report names it)
    for a in (o for o in objs if o["kind"] == "SparkApplication"):
        assert [e["name"] for e in _container(a, "executor")["env"]] == ["SPARKMIRROR_SECRET_MIRROR_USER_PASSWORD"]
        assert _container(a, "driver")["env"] == [*_container(a, "executor")["env"], {
            "name": "SPARKMIRROR_SUBMISSION_ID",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['sparkoperator.k8s.io/submission-id']"}}},
            {"name": "MALLOC_ARENA_MAX", "value": "2"}]  # the driver JVM's arenas (sparkdefaults.DRIVER_ENV)


def test_long_names_are_shortened_stably() -> None:
    src = yaml.safe_load((DATA / "two-groups-scram.input.yaml").read_text())
    src["metadata"]["name"] = "a" * 40
    src["spec"]["flowGroups"][0]["name"] = "b" * 30
    names = [o["metadata"]["name"] for o in render(src).objects]
    assert all(len(n) <= 52 for n in names) and names == [o["metadata"]["name"] for o in render(src).objects]


def test_env_secret_whose_key_looks_like_a_file() -> None:
    """A password kept under a key such as `sasl.key` is still a password: it goes to the environment."""
    src = yaml.safe_load((DATA / "two-groups-scram.input.yaml").read_text())
    src["spec"]["target"]["authentication"]["passwordSecret"]["password"] = "sasl.key"
    app = next(o for o in render(src, Settings(secrets="env")).objects if o["kind"] == "SparkApplication")
    assert {"name": "SPARKMIRROR_SECRET_MIRROR_USER_SASL_KEY",
            "valueFrom": {"secretKeyRef": {"name": "mirror-user", "key": "sasl.key"}}} in _container(app, "driver")["env"]


def _template(spec: dict, role: str) -> dict:
    """The pod template spec Spark applies to the driver or executor pods."""
    return spec[role]["template"]["spec"]


def _container(app: dict, role: str) -> dict:
    return _template(app["spec"], role)["containers"][0]


def test_pods_meet_the_restricted_pod_security_standard() -> None:
    """Driver and executor pods: numeric non-root user, no privilege escalation, no capabilities, RuntimeDefault
    seccomp (what a namespace enforcing `restricted` admits), and mounted Secrets readable by that user. They are
    set through Spark pod templates, which Spark applies itself: the SparkApplication fields of the same name
    need the Spark operator's optional webhook and are dropped without it."""
    src = yaml.safe_load((DATA / "two-groups-scram.input.yaml").read_text())
    for app in (o for o in render(src).objects if o["kind"] == "SparkApplication"):
        assert "volumes" not in app["spec"]
        for role, container in (("driver", "spark-kubernetes-driver"), ("executor", "spark-kubernetes-executor")):
            pod, c = _template(app["spec"], role), _container(app, role)
            sc = pod["securityContext"]
            assert sc["runAsNonRoot"] is True and isinstance(sc["runAsUser"], int) and sc["runAsUser"] > 0
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
            assert c["name"] == container
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            secrets = [v for v in pod["volumes"] if "secret" in v]
            assert secrets
            for v in secrets:  # group-readable files, owned by the pod's fsGroup
                assert v["secret"]["defaultMode"] & 0o040 and sc["fsGroup"] > 0
            if role == "driver":  # the metrics port, declared where Spark keeps it
                assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in c["ports"]
            mounted = {m["name"] for m in c["volumeMounts"]}
            assert {v["name"] for v in pod["volumes"]} <= mounted


def test_pull_secrets_core_requests_and_security_overrides() -> None:
    src = yaml.safe_load((DATA / "two-groups-scram.input.yaml").read_text())
    src["spec"]["spark"].update({"imagePullSecrets": ["team-registry"], "podSecurityContext": {"runAsUser": 2000,
                                                                                              "fsGroup": 2000},
                                 "driver": {"coreRequest": "250m"}, "executor": {"coreRequest": "500m"}})
    objs = render(src, Settings(image_pull_secrets=("org-registry",))).objects
    app = next(o for o in objs if o["kind"] == "SparkApplication")
    assert app["spec"]["imagePullSecrets"] == ["org-registry", "team-registry"]
    assert app["spec"]["driver"]["coreRequest"] == "250m"
    sc = _template(app["spec"], "executor")["securityContext"]
    assert (sc["runAsUser"], sc["fsGroup"], sc["runAsNonRoot"]) == (2000, 2000, True)
    assert Settings.from_env({"SPARKMIRROR_IMAGE_PULL_SECRETS": "a, b"}).image_pull_secrets == ("a", "b")


def test_metrics_bind_reaches_the_flow_group_config() -> None:
    """The chart's metrics.bindAddress (SPARKMIRROR_METRICS_BIND of the operator) is the drivers' bind address;
    unset, the config says nothing and the driver binds every interface. A bad address stops the operator at
    start-up, not every reconcile."""
    src = yaml.safe_load((DATA / "two-groups-scram.input.yaml").read_text())

    def configs(settings: Settings) -> list[FlowGroupConfig]:
        return [FlowGroupConfig.from_yaml(o["data"]["flowgroup.yaml"]) for o in render(src, settings).objects
                if o["kind"] == "ConfigMap"]

    bound = Settings.from_env({"SPARKMIRROR_METRICS_BIND": "127.0.0.1", "SPARKMIRROR_METRICS_PORT": "9191"})
    assert {(c.metricsBind, c.metricsPort) for c in configs(bound)} == {("127.0.0.1", 9191)}
    assert {c.metricsBind for c in configs(Settings.from_env({}))} == {None}
    # per-partition metric families: on unless the chart's metrics.perPartition says false
    assert {c.metricsPerPartition for c in configs(Settings.from_env({}))} == {None}  # on, the driver's default
    off = Settings.from_env({"SPARKMIRROR_METRICS_PER_PARTITION": "false"})
    assert {c.metricsPerPartition for c in configs(off)} == {False}
    # a flow group's own setting wins over the operator's
    src["spec"]["flowGroups"][0]["metricsPerPartition"] = True
    own = {c.name: c.metricsPerPartition for c in configs(off)}
    assert own.pop("east-orders") is None and own and set(own.values()) == {False}
    with pytest.raises(ValueError, match="SPARKMIRROR_METRICS_BIND: expected an IP address, got 'any'"):
        Settings.from_env({"SPARKMIRROR_METRICS_BIND": "any"})


def test_spark_jvms_get_the_epoch_boundary_options_and_a_users_conf_wins() -> None:
    """The driver pod's JVM is up before the job's session settings apply, so its options travel in the
    SparkApplication; as defaultJavaOptions, a user's extraJavaOptions come after them, and a user's own
    defaultJavaOptions replace them."""
    src = yaml.safe_load((DATA / "two-groups-scram.input.yaml").read_text())
    app = next(o for o in render(src, Settings()).objects if o["kind"] == "SparkApplication")
    conf = app["spec"]["sparkConf"]
    assert {k: conf[k] for k in SPARK_DEFAULTS} == SPARK_DEFAULTS
    assert "-XX:TieredStopAtLevel=1" in conf["spark.driver.defaultJavaOptions"].split()
    src["spec"]["spark"]["sparkConf"] = {"spark.driver.defaultJavaOptions": "-XX:+UseParallelGC",
                                         "spark.executor.extraJavaOptions": "-Dx=y"}
    app = next(o for o in render(src, Settings()).objects if o["kind"] == "SparkApplication")
    conf = app["spec"]["sparkConf"]
    assert conf["spark.driver.defaultJavaOptions"] == "-XX:+UseParallelGC"
    assert conf["spark.executor.defaultJavaOptions"] == SPARK_DEFAULTS["spark.executor.defaultJavaOptions"]
    assert conf["spark.executor.extraJavaOptions"] == "-Dx=y"


def _lanes(objs: list[dict], app: dict) -> int:
    """The lane tasks of the flow group an application runs, from the ConfigMap it mounts."""
    volumes = app["spec"]["executor"]["template"]["spec"]["volumes"]
    cm = next(v["configMap"]["name"] for v in volumes if v["name"] == "flowgroup")
    data = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == cm)["data"]
    group = FlowGroupConfig.model_validate(yaml.safe_load(data["flowgroup.yaml"]))
    return sum(group.lanes_of(m) for m in group.mirrors)


def test_every_lane_gets_a_task_slot_and_the_pod_asks_for_the_specs_cores() -> None:
    """Lanes on fewer task slots take turns (a handoff then moves the later lanes' partitions an epoch late):
    executor cores cover the lanes, the pod's CPU request stays the spec's."""
    src = yaml.safe_load((DATA / "two-groups-scram.input.yaml").read_text())
    src["spec"]["spark"]["executor"] = {"instances": 1, "cores": 1}
    objs = render(src, Settings()).objects
    apps = [o for o in objs if o["kind"] == "SparkApplication"]
    assert apps and all(_lanes(objs, a) > 1 for a in apps)
    for app in apps:
        executor, lanes = app["spec"]["executor"], _lanes(objs, app)
        assert executor["instances"] * executor["cores"] >= lanes > executor["instances"] * (executor["cores"] - 1)
        assert executor["coreRequest"] in ("1", "2")  # the spec's cores (the east group's own executor: 2)
        assert "memoryOverhead" not in executor  # the input sets spark.executor.memoryOverhead: the user's wins
    del src["spec"]["spark"]["sparkConf"]["spark.executor.memoryOverhead"]
    src["spec"]["spark"]["executor"] = {"instances": 1, "cores": 1, "memory": "2g"}
    for g in src["spec"]["flowGroups"]:
        g.pop("executor", None)
    objs = render(src, Settings()).objects
    for app in (o for o in objs if o["kind"] == "SparkApplication"):
        # Spark's own default for a Python application (40% of 2g) and a Python worker's 128 MiB per added slot
        assert app["spec"]["executor"]["memoryOverhead"] == f"{819 + 128 * (_lanes(objs, app) - 1)}m"
    src["spec"]["spark"]["executor"] = {"instances": 2, "cores": 1, "coreRequest": "300m"}
    for g in src["spec"]["flowGroups"]:
        g.pop("executor", None)
    src["spec"]["spark"]["sparkConf"] = {"spark.task.cpus": "2"}
    objs = render(src, Settings()).objects
    for app in (o for o in objs if o["kind"] == "SparkApplication"):
        executor = app["spec"]["executor"]
        assert executor["coreRequest"] == "300m"  # the user's request is kept whatever the slots
        assert executor["instances"] * executor["cores"] >= 2 * _lanes(objs, app)  # task.cpus 2: 2 cores a lane
