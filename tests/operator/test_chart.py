"""The Helm chart: values agree with values.schema.json and the templates, CRDs are the generated ones; with a
helm binary (built from its Go module into the cache, see the report) it lints, renders, and the rendered
objects pass the real API server's validation, and the operator's RBAC from the chart suffices to reconcile."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkmirror_dev import paths
from sparkmirror_operator import crdgen

CHART = Path(__file__).resolve().parents[2] / "charts" / "sparkmirror"


def helm() -> str | None:
    cached = paths.bin_dir() / "helm"
    return str(cached) if cached.exists() else shutil.which("helm")


def _check(schema: dict, value, path: str = "values") -> list[str]:
    """The subset of JSON schema the chart's schema uses (type, required, enum, additionalProperties, items)."""
    errs = []
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "number": (int, float), "integer": int}
    t = schema.get("type")
    if t and not isinstance(value, types[t]) or (t in ("number", "integer") and isinstance(value, bool)):
        return [f"{path}: expected {t}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errs += [f"{path}.{r}: required" for r in schema.get("required", []) if r not in value]
        for k, v in value.items():
            if k in props:
                errs += _check(props[k], v, f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{path}.{k}: not allowed by the schema")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            errs += _check(schema["items"], v, f"{path}[{i}]")
    return errs


def test_values_match_schema_and_templates() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert _check(schema, values) == []
    assert set(values) == set(schema["properties"]), "every value is in the schema and the other way round"
    assert _check(schema, {**values, "secretsAs": "inline"}) == ["values.secretsAs: 'inline' not in ['files', 'env']"]
    # every .Values.a.b the templates use exists in values.yaml
    for tpl in (CHART / "templates").glob("*"):
        for ref in re.findall(r"\.Values\.([A-Za-z0-9_.]+)", tpl.read_text()):
            node = values
            for part in ref.split("."):
                assert isinstance(node, dict) and part in node, f"{tpl.name}: .Values.{ref} not in values.yaml"
                node = node[part]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "sparkmirror"


def test_chart_crds_are_the_generated_ones() -> None:
    assert (CHART / "crds" / crdgen.CRD_FILE).read_text() == crdgen.render()


@pytest.mark.skipif(helm() is None, reason="no helm binary (build: go install helm.sh/helm/v3/cmd/helm@v3.22.0)")
def test_helm_lint_and_template() -> None:
    out = subprocess.run([helm(), "lint", "--strict", str(CHART)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    bad = subprocess.run([helm(), "template", "x", str(CHART), "--kube-version", paths.K8S_VERSION,
                          "--set", "secretsAs=inline"], capture_output=True,
                         text=True)
    assert bad.returncode != 0 and "secretsAs" in bad.stderr


def _wait_rbac_in_force(kube, docs: list[dict], user: str) -> None:
    """Every rendered Role's first rule in force for user: the apiserver authorizes from an informer's cache."""
    for d in docs:
        if d["kind"] == "Role" and d["metadata"]["name"] != DRIVER_ROLE:  # the drivers': test_rbac.py
            rule = d["rules"][0]
            group = rule["apiGroups"][0]
            resource = rule["resources"][0] + (f".{group}" if group else "")
            kube.wait_allowed(user, d["metadata"]["namespace"], rule["verbs"][0], resource)


def _template(namespace: str, *args: str) -> list[dict]:
    out = subprocess.run([helm(), "template", "smm", str(CHART), "--namespace", namespace,
                          "--kube-version", paths.K8S_VERSION, *args],
                         capture_output=True, text=True, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.mark.k8s
@pytest.mark.skipif(helm() is None, reason="no helm binary")
def test_rendered_chart_is_valid_and_its_rbac_suffices(kube, kmm2_crd, namespace) -> None:
    from kubernetes import client

    from sparkmirror_operator.kubeapi import KubeApi
    from sparkmirror_operator.reconcile import Reconciler
    from sparkmirror_operator.render import Settings

    docs = _template(namespace)  # the default: the release's own namespace only
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "Deployment", "NetworkPolicy", "NetworkPolicy", "Role", "Role", "Role", "RoleBinding",
                     "RoleBinding", "RoleBinding", "Service", "Service", "ServiceAccount", "ServiceAccount",
                     "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                     "ValidatingAdmissionPolicyBinding"]
    cluster_docs = _template(namespace, "--set", "watchAllNamespaces=true", "--set", "replicas=2",
                             "--set-json", 'metrics.networkPolicy.from=[{"namespaceSelector": {}}]')
    assert sorted(d["kind"] for d in cluster_docs) == [
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "NetworkPolicy", "NetworkPolicy",
        "PodDisruptionBudget", "Role", "Role", "Role", "RoleBinding", "RoleBinding", "RoleBinding", "Service",
        "Service", "ServiceAccount", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicyBinding"]
    text = yaml.safe_dump_all(docs)
    res = kube.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(cluster_docs), check=False)
    assert res.returncode == 0, res.stderr
    kube.kubectl("apply", "-f", "-", input=text)  # namespaced RBAC for real
    # reconcile a resource as the chart's service account: its RBAC must allow everything, escalation included
    sa = next(d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] != DRIVER_ROLE)["metadata"]["name"]
    _wait_rbac_in_force(kube, docs, f"system:serviceaccount:{namespace}:{sa}")
    with kube.api_client() as admin:
        admin_api = KubeApi(admin)
        body = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
                "metadata": {"name": "rbac", "namespace": namespace},
                "spec": {"target": {"alias": "b", "bootstrapServers": "127.0.0.1:1"},
                         "mirrors": [{"source": {"alias": "a", "bootstrapServers": "127.0.0.1:2"}}]}}
        created = admin_api.create(body)
    with kube.api_client() as api:
        api.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:{sa}")
        as_operator = KubeApi(api)
        result = Reconciler(as_operator, Settings.from_env(_env(docs))).reconcile(created)
        assert not [c for c in result.status["conditions"] if c["type"] == "Degraded" and c["status"] == "True"], \
            result.status
        assert "SparkApplication/rbac-a" in result.applied
        app = as_operator.get("SparkApplication", namespace, "rbac-a")
        assert app["spec"]["driver"]["serviceAccount"] == DRIVER_ROLE  # the chart's account, named to the operator
        as_operator.patch_status("KafkaMirrorMaker2", namespace, "rbac", result.status)
        # and nothing beyond: the operator cannot read Secrets' lists or touch other kinds
        with pytest.raises(client.ApiException) as e:
            as_operator.list("Secret", namespace)
        assert e.value.status == 403


@pytest.mark.k8s
@pytest.mark.skipif(helm() is None, reason="no helm binary")
def test_leader_election_rbac_alone_suffices(kube, namespace) -> None:
    """The release's namespace serving no resources (watchNamespaces elsewhere): the election Role alone lets the
    chart's account create, renew and release the Lease the Deployment names, and no other Lease."""
    from kubernetes import client

    from sparkmirror_operator.kubeapi import KubeApi
    from sparkmirror_operator.leader import LeaderElector, Timing

    docs = _template(namespace, "--set", "watchNamespaces={elsewhere}")
    mine = [d for d in docs if d["metadata"]["name"] == ELECTION_ROLE
            or d["kind"] == "ServiceAccount" and d["metadata"]["name"] != DRIVER_ROLE]
    assert sorted(d["kind"] for d in mine) == ["Role", "RoleBinding", "ServiceAccount"]
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(mine))
    sa = next(d for d in mine if d["kind"] == "ServiceAccount")["metadata"]["name"]
    lease = next(a.split("=", 1)[1] for a in _args(docs) if a.startswith("--leader-elect-resource-name="))
    _wait_rbac_in_force(kube, mine, f"system:serviceaccount:{namespace}:{sa}")
    with kube.api_client() as api:
        api.set_default_header("Impersonate-User", f"system:serviceaccount:{namespace}:{sa}")
        elector = LeaderElector(KubeApi(api), namespace, lease, "smm-0", Timing())
        assert elector.try_acquire_or_renew() and elector.try_acquire_or_renew()  # created, renewed
        elector.release()
        assert elector.try_acquire_or_renew()  # taken again at once
        with pytest.raises(client.ApiException) as e:
            KubeApi(api).get("Lease", namespace, "somebody-elses")
        assert e.value.status == 403
    with kube.api_client() as admin:
        held = KubeApi(admin).get("Lease", namespace, lease)
    assert held["spec"]["holderIdentity"] == "smm-0"


def test_spark_pull_secrets_reach_the_operator() -> None:
    """sparkImage.pullSecrets become the operator's default pull secrets for driver and executor pods."""
    docs = _template("ops", "--set", "sparkImage.pullSecrets={reg-a,reg-b}")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SPARKMIRROR_IMAGE_PULL_SECRETS"] == "reg-a,reg-b"
    plain = next(d for d in _template("ops") if d["kind"] == "Deployment")
    assert "SPARKMIRROR_IMAGE_PULL_SECRETS" not in {e["name"] for e in
                                                    plain["spec"]["template"]["spec"]["containers"][0]["env"]}


# ---- least privilege ---------------------------------------------------------------------------------------

ELECTION_ROLE = "smm-sparkmirror-leader-election"
DRIVER_ROLE = "smm-sparkmirror-driver"  # the drivers' ServiceAccount, Role and RoleBinding (test_rbac.py)


def _rules(docs: list[dict], kind: str) -> dict[tuple[str | None, str], list[dict]]:
    """(namespace, name) -> rules of every Role or ClusterRole rendered for the operator, but the leader
    election's (see test_replicas_elect_a_leader_on_one_lease)."""
    return {(d["metadata"].get("namespace"), d["metadata"]["name"]): d["rules"] for d in docs
            if d["kind"] == kind and d["metadata"]["name"] not in (ELECTION_ROLE, DRIVER_ROLE)}


def _args(docs: list[dict]) -> list[str]:
    return next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]


def _env(docs: list[dict]) -> dict[str, str]:
    container = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def _secret_verbs(rules: list[dict]) -> set[str]:
    return {v for r in rules if "secrets" in r["resources"] or "*" in r["resources"] for v in r["verbs"]}


@pytest.mark.skipif(helm() is None, reason="no helm binary")
@pytest.mark.parametrize(("values", "namespaces"), [
    ([], ["ops"]),
    (["--set", "watchNamespaces={a,b}"], ["a", "b"]),
    (["--set", "watchAllNamespaces=true"], ["ops"]),
    (["--set", "watchAllNamespaces=true", "--set", "watchNamespaces={a}"], ["a"]),
])
def test_secrets_are_read_by_name_in_namespaces_only(values: list[str], namespaces: list[str]) -> None:
    """Whatever the values: Secrets only through Roles in the listed namespaces, only `get` (by the name a
    resource gives), never list or watch, never through a ClusterRole."""
    docs = _template("ops", *values)
    assert all(not _secret_verbs(rules) for rules in _rules(docs, "ClusterRole").values())
    roles = _rules(docs, "Role")
    assert sorted(ns for ns, _ in roles) == namespaces
    assert all(_secret_verbs(rules) == {"get"} for rules in roles.values())
    assert sorted(d["metadata"]["namespace"] for d in docs if d["kind"] == "RoleBinding"
                  and d["metadata"]["name"] not in (ELECTION_ROLE, DRIVER_ROLE)) == namespaces
    # the drivers: a Role per served namespace, never a ClusterRole, never Secrets
    drivers = {d["metadata"]["namespace"]: d["rules"] for d in docs if d["metadata"]["name"] == DRIVER_ROLE
               and d["kind"] == "Role"}
    assert sorted(drivers) == namespaces and all(not _secret_verbs(r) for r in drivers.values())


@pytest.mark.skipif(helm() is None, reason="no helm binary")
def test_by_default_the_operator_serves_its_own_namespace_only() -> None:
    docs = _template("ops")
    assert not [d for d in docs if d["kind"].startswith("Cluster")]
    assert [a for a in _args(docs) if a.startswith("--namespace")] == ["--namespace=ops"]
    ((where, rules),) = _rules(docs, "Role").items()
    assert where == ("ops", "smm-sparkmirror")
    assert not [r for r in rules if {"namespaces", "customresourcedefinitions"} & set(r["resources"])]
    # widened by name
    wide = _template("ops", "--set", "watchNamespaces={team-a,team-b}")
    assert [a for a in _args(wide) if a.startswith("--namespace")] == ["--namespace=team-a", "--namespace=team-b"]
    assert sorted(ns for ns, _ in _rules(wide, "Role")) == ["team-a", "team-b"]
    # or to every namespace, explicitly: a ClusterRole without Secrets, Secrets by Role where listed
    every = _template("ops", "--set", "watchAllNamespaces=true")
    assert not [a for a in _args(every) if a.startswith("--namespace")]
    assert list(_rules(every, "ClusterRole")) == [(None, "smm-sparkmirror")]
    assert _rules(every, "Role") == {("ops", "smm-sparkmirror-secrets"): [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}


@pytest.mark.skipif(helm() is None, reason="no helm binary")
def test_network_policy_guards_the_mirrors_and_their_metrics_port() -> None:
    """The mirrors' pods (the label the operator puts on drivers and executors) take connections only from each
    other, plus the metrics port from the scrapers the values name (a monitoring namespace by name, more peers);
    the operator's pods only their health port, plus the metrics port from the same scrapers; the drivers bind
    where the values say."""
    from sparkmirror_operator.render import FIELD_MANAGER, LABEL_MANAGED_BY

    def policies(docs: list[dict]) -> dict[tuple[str, str], dict]:
        return {(d["metadata"]["namespace"], d["metadata"]["name"]): d["spec"] for d in docs
                if d["kind"] == "NetworkPolicy"}

    mine = {"podSelector": {"matchLabels": {LABEL_MANAGED_BY: FIELD_MANAGER}}}
    health = {"ports": [{"port": "health", "protocol": "TCP"}]}
    default = _template("ops")
    operator_pods = next(d for d in default if d["kind"] == "Deployment")["spec"]["selector"]["matchLabels"]
    assert policies(default) == {
        ("ops", "smm-sparkmirror-mirrors"): {"podSelector": mine["podSelector"], "policyTypes": ["Ingress"],
                                             "ingress": [{"from": [mine]}]},
        ("ops", "smm-sparkmirror-operator"): {"podSelector": {"matchLabels": operator_pods},
                                              "policyTypes": ["Ingress"], "ingress": [health]}}
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                  "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    other = {"ipBlock": {"cidr": "10.1.0.0/16"}}
    docs = _template("ops", "--set", "watchNamespaces={a,b}", "--set", "metrics.port=9191",
                     "--set", "metrics.bindAddress=127.0.0.1",
                     "--set", "metrics.networkPolicy.monitoringNamespace=monitoring",
                     "--set", "metrics.networkPolicy.monitoringPodLabels.app\\.kubernetes\\.io/name=prometheus",
                     "--set-json", f"metrics.networkPolicy.from={json.dumps([other])}")
    nps = policies(docs)
    assert {k: v["ingress"] for k, v in nps.items() if k[1].endswith("-mirrors")} == {
        (ns, "smm-sparkmirror-mirrors"): [{"from": [mine]}, {"from": [prometheus, other],
                                                             "ports": [{"port": 9191, "protocol": "TCP"}]}]
        for ns in ("a", "b")}
    assert nps[("ops", "smm-sparkmirror-operator")]["ingress"] == [
        health, {"from": [prometheus, other], "ports": [{"port": "metrics", "protocol": "TCP"}]}]
    ports = {p["name"] for p in next(d for d in docs if d["kind"] == "Deployment")
             ["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert ports == {"health", "metrics"}, "the operator policy's named ports are the container's"
    env = {e["name"]: e.get("value") for e in
           next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SPARKMIRROR_METRICS_PORT"] == "9191" and env["SPARKMIRROR_METRICS_BIND"] == "127.0.0.1"
    assert env["SPARKMIRROR_METRICS_PER_PARTITION"] == "true"
    off = _template("ops", "--set", "metrics.networkPolicy.create=false", "--set", "metrics.perPartition=false")
    assert not [d for d in off if d["kind"] == "NetworkPolicy"]
    assert {"name": "SPARKMIRROR_METRICS_PER_PARTITION", "value": "false"} in \
        next(d for d in off if d["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]


@pytest.mark.skipif(helm() is None, reason="no helm binary")
def test_replicas_elect_a_leader_on_one_lease() -> None:
    """Every replica runs with --leader-elect on one Lease in the release's namespace, named like a pod; above one
    replica a PodDisruptionBudget keeps a standby through drains and the replicas spread over nodes."""
    docs = _template("ops", "--set", "watchNamespaces={a,b}")
    dep = next(d for d in docs if d["kind"] == "Deployment")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "RollingUpdate"
    assert [a for a in _args(docs) if a.startswith("--leader-elect")] == [
        "--leader-elect", "--leader-elect-resource-name=smm-sparkmirror-leader",
        "--leader-elect-resource-namespace=ops", "--leader-elect-lease-duration=15",
        "--leader-elect-renew-deadline=10", "--leader-elect-retry-period=2"]
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert not [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    assert "affinity" not in dep["spec"]["template"]["spec"]
    # the Lease by name, in the release's namespace, whichever namespaces are served
    election = [d for d in docs if d["metadata"]["name"] == ELECTION_ROLE]
    assert sorted((d["kind"], d["metadata"]["namespace"]) for d in election) == [("Role", "ops"),
                                                                                 ("RoleBinding", "ops")]
    rules = next(d for d in election if d["kind"] == "Role")["rules"]
    assert rules == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["smm-sparkmirror-leader"],
         "verbs": ["get", "update", "patch"]}]

    ha = _template("ops", "--set", "replicas=2", "--set", "leaderElection.leaseDurationSeconds=30")
    dep = next(d for d in ha if d["kind"] == "Deployment")
    assert dep["spec"]["replicas"] == 2 and "--leader-elect-lease-duration=30" in _args(ha)
    (pdb,) = [d for d in ha if d["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"] == {"minAvailable": 1, "selector": dep["spec"]["selector"]}
    term = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname" and term["labelSelector"] == dep["spec"]["selector"]
    own = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ops"]}]}]}}}
    mine = _template("ops", "--set", "replicas=2", "--set-json", f"affinity={json.dumps(own)}")
    assert next(d for d in mine if d["kind"] == "Deployment")["spec"]["template"]["spec"]["affinity"] == own

    bad = subprocess.run([helm(), "template", "x", str(CHART), "--kube-version", paths.K8S_VERSION,
                          "--set", "leaderElection.renewDeadlineSeconds=20"], capture_output=True, text=True)
    assert bad.returncode != 0 and \
        "leaderElection.renewDeadlineSeconds must be less than leaderElection.leaseDurationSeconds" in bad.stderr


# ---- monitoring: Services, monitors, dashboard, alerts ----------------------------------------------------------

DASHBOARD = CHART / "dashboards" / "sparkmirror.json"
MONITORING = ("--set", "metrics.monitors.enabled=true", "--set", "metrics.prometheusRule.enabled=true")


def exported_series() -> set[str]:
    """Every series name the drivers and the operator serve, from their own code (not a hand list)."""
    from prometheus_client import ProcessCollector

    from sparkmirror.metrics import EXPORTED, families
    from sparkmirror_operator import metrics as operator_metrics

    fams = [*families("fg", {}), *operator_metrics.REGISTRY.collect(), *ProcessCollector(registry=None).collect()]
    out = {"up"}  # Prometheus' own, per scrape target
    for f in fams:
        out |= {f.name + "_total"} if f.type == "counter" else \
            {f.name + s for s in ("_bucket", "_sum", "_count")} if f.type == "histogram" else {f.name}
    assert set(EXPORTED) <= {n.removesuffix("_bucket") for n in out}
    assert set(operator_metrics.EXPORTED) <= {n.removesuffix("_bucket") for n in out}
    return out


def metric_names(expr: str) -> set[str]:
    """The series a PromQL expression selects (ours, process_*, up): names followed by a selector or range."""
    found = set(re.findall(r"\b((?:sparkmirror|process)_[a-z0-9_]+|up)\s*(?=[{\[)\s]|$)", expr))
    return {n for n in found if n != "sparkmirror_operator"}


def dashboard_exprs() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]


def test_dashboard_parses_and_names_only_exported_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = dashboard_exprs()
    assert dash["uid"] == "sparkmirror" and len(exprs) >= 12
    exported = exported_series()
    used = set().union(*map(metric_names, exprs))
    assert used - exported == set(), f"the dashboard names metrics nobody exports: {used - exported}"
    # what the issue asks the dashboard to show, per mirror and flow group
    # every panel reads per-mirror families, so it works with metrics.perPartition false
    assert not {n for n in used if n.startswith("sparkmirror_partition_")}
    for name in ("sparkmirror_mirror_records_total", "sparkmirror_mirror_bytes_total",
                 "sparkmirror_mirror_lag_records", "sparkmirror_mirror_lag_seconds",
                 "sparkmirror_mirror_commit_stall_seconds",
                 "sparkmirror_mirror_replication_latency_seconds_bucket", "sparkmirror_mirror_transactions_total",
                 "sparkmirror_mirror_errors_total", "sparkmirror_operator_handoffs_total",
                 "process_resident_memory_bytes", "sparkmirror_driver_jvm_memory_bytes",
                 "sparkmirror_operator_reconciles_total", "sparkmirror_operator_reconcile_duration_seconds_bucket"):
        assert name in used, name
    assert all("flow_group" in e for e in exprs if "operator_reconcile" not in e)


@pytest.mark.skipif(helm() is None, reason="no helm binary")
def test_chart_renders_monitors_dashboard_and_rules() -> None:
    from sparkmirror_operator.render import FIELD_MANAGER, LABEL_MANAGED_BY

    assert not {d["kind"] for d in _template("ops")} & {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
    docs = _template("ops", *MONITORING, "--set", "watchNamespaces={a,b}", "--set", "metrics.operatorPort=9182",
                     "--set", "metrics.monitors.labels.release=prom")
    by_kind: dict[str, list[dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    # the dashboard ConfigMap carries the repository's JSON file as it is, for Grafana's sidecar
    (cm,) = by_kind["ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["sparkmirror.json"]) == json.loads(DASHBOARD.read_text())
    # drivers: a headless Service per served namespace and a PodMonitor, selecting the labels drivers get
    drivers = {d["metadata"]["namespace"]: d for d in by_kind["Service"] if d["metadata"]["name"].endswith("-drivers")}
    assert sorted(drivers) == ["a", "b"]
    selector = {LABEL_MANAGED_BY: FIELD_MANAGER, "spark-role": "driver"}
    assert all(d["spec"]["selector"] == selector and d["spec"]["clusterIP"] == "None" and
               d["spec"]["ports"][0]["targetPort"] == "metrics" for d in drivers.values())
    (pm,) = by_kind["PodMonitor"]
    assert pm["spec"]["selector"]["matchLabels"] == selector and pm["metadata"]["labels"]["release"] == "prom"
    assert pm["spec"]["namespaceSelector"] == {"matchNames": ["a", "b"]}
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    # target labels: flow group and resource, the job named like the drivers' Service; no worker generation
    relabel = pm["spec"]["podMetricsEndpoints"][0]["relabelings"]
    assert {r["targetLabel"] for r in relabel} == {"flow_group", "resource", "job"}
    assert {"targetLabel": "job", "replacement": drivers["a"]["metadata"]["name"]} in relabel
    every = _template("ops", *MONITORING, "--set", "watchAllNamespaces=true")
    assert next(d for d in every if d["kind"] == "PodMonitor")["spec"]["namespaceSelector"] == {"any": True}
    # the operator: its container serves the metrics port its Service and ServiceMonitor name
    dep = by_kind["Deployment"][0]["spec"]["template"]["spec"]["containers"][0]
    assert "--metrics-port=9182" in dep["args"] and {"name": "metrics", "containerPort": 9182} in dep["ports"]
    (op_svc,) = [d for d in by_kind["Service"] if d["metadata"]["name"].endswith("-metrics")]
    (sm,) = by_kind["ServiceMonitor"]
    assert op_svc["spec"]["ports"][0]["port"] == 9182 and sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert all(op_svc["metadata"]["labels"][k] == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    assert op_svc["spec"]["selector"] == by_kind["Deployment"][0]["spec"]["selector"]["matchLabels"]
    # the alerts name only exported series; the operator's job is its Service's name
    (rule,) = by_kind["PrometheusRule"]
    rules = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} == {"SparkmirrorMirrorDown", "SparkmirrorMirrorGone", "SparkmirrorLagGrowing",
                                           "SparkmirrorPartitionStalled", "SparkmirrorTimeLag",
                                           "SparkmirrorDriverTargetDown", "SparkmirrorOperatorDown",
                                           "SparkmirrorReconcileErrors"}
    # each links its runbook: a section of docs/runbooks.md whose heading is the alert's name
    headings = re.findall(r"^## (\w+)$", (CHART.parents[1] / "docs" / "runbooks.md").read_text(), re.M)
    assert sorted(headings) == sorted(r["alert"] for r in rules)
    assert all(r["annotations"]["runbook_url"].endswith(f"docs/runbooks.md#{r['alert'].lower()}") for r in rules)
    used = set().union(*(metric_names(r["expr"]) for r in rules))
    assert used - exported_series() == set(), used - exported_series()
    assert f'job="{op_svc["metadata"]["name"]}"' in next(r["expr"] for r in rules
                                                         if r["alert"] == "SparkmirrorOperatorDown")
