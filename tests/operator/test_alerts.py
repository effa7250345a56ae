"""The chart's alerts under Prometheus' own rule engine: `promtool check rules` accepts the rendered rules and every
dashboard query, and `promtool test rules` shows each alert firing on the series that should page and not firing
on those that should not (promtool built from the Prometheus Go module into the cache, install.promtool())."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from sparkmirror_dev import install

from .test_chart import MONITORING, _template, dashboard_exprs, helm

pytestmark = pytest.mark.skipif(helm() is None, reason="no helm binary")

RELEASE_NS = "ops"
DRIVERS, OPERATOR = "smm-sparkmirror-drivers", "smm-sparkmirror-metrics"  # the scrape jobs (release smm)
RUNBOOK = "https://runbooks.example/sparkmirror.md"
MIRROR = 'namespace="ns", flow_group="fg", mirror="m", resource="kmm"'
DOWN_AFTER = "1x10 0x30"  # up for 10 minutes, then down


@pytest.fixture(scope="module")
def promtool() -> Path:
    return install.promtool()


def rules(*values: str) -> dict:
    """The rendered PrometheusRule's spec (what the Prometheus operator hands Prometheus)."""
    (rule,) = [d for d in _template(RELEASE_NS, *MONITORING, "--set",
                                    f"metrics.prometheusRule.runbookBaseUrl={RUNBOOK}", *values)
               if d["kind"] == "PrometheusRule"]
    return rule["spec"]


def descriptions(spec: dict) -> dict[str, str]:
    return {r["alert"]: r["annotations"]["description"] for g in spec["groups"] for r in g["rules"]}


def alert(spec: dict, name: str, summary: str, **labels: str) -> dict:
    """An expected alert: its labels, and annotations with the summary as Prometheus expands it."""
    severity = next(r["labels"]["severity"] for g in spec["groups"] for r in g["rules"] if r["alert"] == name)
    return {"exp_labels": {**labels, "severity": severity},
            "exp_annotations": {"summary": summary, "description": descriptions(spec)[name],
                                "runbook_url": f"{RUNBOOK}#{name.lower()}"}}


def cases(spec: dict) -> list[dict]:
    """Per alert: input series (one-minute steps) and when it must and must not fire."""
    mirror = dict(namespace="ns", flow_group="fg", mirror="m")
    mirror_summary = "Mirror m (ns/fg)"
    return [
        # a driver reporting an error: pending for 5 minutes, then firing; a healthy mirror beside it never fires
        {"input_series": [{"series": f'sparkmirror_mirror_up{{{MIRROR}, pod="d1"}}', "values": DOWN_AFTER},
                          {"series": 'sparkmirror_mirror_up{namespace="ns", flow_group="fg", mirror="ok", '
                                     'resource="kmm", pod="d1"}', "values": "1x40"}],
         "alert_rule_test": [
             {"eval_time": "13m", "alertname": "SparkmirrorMirrorDown", "exp_alerts": []},
             {"eval_time": "20m", "alertname": "SparkmirrorMirrorDown",
              "exp_alerts": [alert(spec, "SparkmirrorMirrorDown", f"{mirror_summary} is down", **mirror)]}]},
        # flow group fg: the operator runs it, its driver stops reporting at 20 minutes (its series go stale 5
        # minutes later) -> fires 10 minutes after that and still fires two hours later: it does not clear itself.
        # fg2 stopped on purpose at the same time (the operator no longer expects it): never fires. fg3's driver
        # is gone from 20 to 50 minutes: fires, then clears once it reports again
        {"input_series": [
            {"series": f'sparkmirror_operator_flow_group_expected{{job="{OPERATOR}", namespace="{RELEASE_NS}", '
                       f'resource_namespace="ns", resource="kmm", flow_group="fg"}}', "values": "1x180"},
            {"series": f'sparkmirror_operator_flow_group_expected{{job="{OPERATOR}", namespace="{RELEASE_NS}", '
                       f'resource_namespace="ns", resource="kmm", flow_group="fg2"}}', "values": "1x20"},
            {"series": f'sparkmirror_operator_flow_group_expected{{job="{OPERATOR}", namespace="{RELEASE_NS}", '
                       f'resource_namespace="ns", resource="kmm", flow_group="fg3"}}', "values": "1x180"},
            {"series": f'sparkmirror_mirror_up{{{MIRROR}, pod="d1"}}', "values": "1x20"},
            {"series": 'sparkmirror_mirror_up{namespace="ns", flow_group="fg2", mirror="m", resource="kmm"}',
             "values": "1x20"},
            {"series": 'sparkmirror_mirror_up{namespace="ns", flow_group="fg3", mirror="m", resource="kmm"}',
             "values": "1x20 _x30 1x130"}],
         "alert_rule_test": [
             {"eval_time": "30m", "alertname": "SparkmirrorMirrorGone", "exp_alerts": []},
             *({"eval_time": t, "alertname": "SparkmirrorMirrorGone",
                "exp_alerts": [alert(spec, "SparkmirrorMirrorGone", f"Flow group {fg} of ns/kmm serves no metrics",
                                     resource_namespace="ns", resource="kmm", flow_group=fg) for fg in groups]}
               for t, groups in (("40m", ("fg", "fg3")), ("60m", ("fg",)), ("170m", ("fg",))))]},
        # a driver pod whose endpoint stops answering scrapes; another that answers
        {"input_series": [{"series": f'up{{job="{DRIVERS}", namespace="ns", pod="d1", flow_group="fg", '
                                     f'resource="kmm", instance="10.0.0.1:9090"}}', "values": DOWN_AFTER},
                          {"series": f'up{{job="{DRIVERS}", namespace="ns", pod="d2", flow_group="fg2", '
                                     f'resource="kmm", instance="10.0.0.2:9090"}}', "values": "1x40"}],
         "alert_rule_test": [
             {"eval_time": "13m", "alertname": "SparkmirrorDriverTargetDown", "exp_alerts": []},
             {"eval_time": "20m", "alertname": "SparkmirrorDriverTargetDown", "exp_alerts": [
                 alert(spec, "SparkmirrorDriverTargetDown", "Driver ns/d1 (flow group fg) does not answer scrapes",
                       job=DRIVERS, namespace="ns", pod="d1", flow_group="fg", resource="kmm",
                       instance="10.0.0.1:9090")]}]},
        # one stuck partition among healthy ones (per-partition families): the alert names it; the mirror's max
        # is not a second alert. A mirror without per-partition series (m2) fires per mirror
        {"input_series": [
            {"series": f'sparkmirror_partition_commit_stall_seconds{{{MIRROR}, topic="t", partition="0"}}',
             "values": "0+60x30"},
            {"series": f'sparkmirror_partition_commit_stall_seconds{{{MIRROR}, topic="t", partition="1"}}',
             "values": "0x30"},
            {"series": f'sparkmirror_mirror_commit_stall_seconds{{{MIRROR}}}', "values": "0+60x30"},
            {"series": 'sparkmirror_mirror_commit_stall_seconds{namespace="ns", flow_group="fg", mirror="m2"}',
             "values": "0+60x30"},
            {"series": 'sparkmirror_mirror_commit_stall_seconds{namespace="ns", flow_group="fg", mirror="ok"}',
             "values": "0x30"}],
         "alert_rule_test": [
             {"eval_time": "12m", "alertname": "SparkmirrorPartitionStalled", "exp_alerts": []},
             {"eval_time": "15m", "alertname": "SparkmirrorPartitionStalled", "exp_alerts": [
                 alert(spec, "SparkmirrorPartitionStalled", f"{mirror_summary} commits nothing for t/0",
                       **mirror, topic="t", partition="0"),
                 alert(spec, "SparkmirrorPartitionStalled", "Mirror m2 (ns/fg) commits nothing",
                       namespace="ns", flow_group="fg", mirror="m2")]}]},
        # the oldest record not mirrored ages a minute a minute: over 15 minutes at 16, firing 5 minutes later
        {"input_series": [{"series": f'sparkmirror_mirror_lag_seconds{{{MIRROR}, pod="d1"}}', "values": "0+60x40"},
                          {"series": 'sparkmirror_mirror_lag_seconds{namespace="ns", flow_group="fg", mirror="ok"}',
                           "values": "3x40"}],
         "alert_rule_test": [
             {"eval_time": "19m", "alertname": "SparkmirrorTimeLag", "exp_alerts": []},
             {"eval_time": "25m", "alertname": "SparkmirrorTimeLag", "exp_alerts": [
                 alert(spec, "SparkmirrorTimeLag", f"{mirror_summary} is 25m 0s behind", **mirror)]}]},
        # lag in records rising (m) against lag standing still (ok)
        {"input_series": [{"series": f'sparkmirror_mirror_lag_records{{{MIRROR}}}', "values": "100+10x40"},
                          {"series": 'sparkmirror_mirror_lag_records{namespace="ns", flow_group="fg", mirror="ok"}',
                           "values": "100x40"}],
         "alert_rule_test": [
             {"eval_time": "12m", "alertname": "SparkmirrorLagGrowing", "exp_alerts": []},
             {"eval_time": "25m", "alertname": "SparkmirrorLagGrowing",
              "exp_alerts": [alert(spec, "SparkmirrorLagGrowing", f"{mirror_summary} falls behind", **mirror)]}]},
        # the operator's endpoint down (and absent: the same alert, with the same labels); reconciles failing
        {"input_series": [{"series": f'up{{job="{OPERATOR}", namespace="{RELEASE_NS}", pod="op"}}',
                           "values": DOWN_AFTER},
                          {"series": f'sparkmirror_operator_reconciles_total{{job="{OPERATOR}", '
                                     f'namespace="{RELEASE_NS}", trigger="change", result="error"}}',
                           "values": "0x10 1+1x30"}],
         "alert_rule_test": [
             {"eval_time": "13m", "alertname": "SparkmirrorOperatorDown", "exp_alerts": []},
             {"eval_time": "20m", "alertname": "SparkmirrorOperatorDown", "exp_alerts": [
                 alert(spec, "SparkmirrorOperatorDown", f"The sparkmirror operator in {RELEASE_NS} is down",
                       job=OPERATOR, namespace=RELEASE_NS)]},
             {"eval_time": "20m", "alertname": "SparkmirrorReconcileErrors", "exp_alerts": []},
             {"eval_time": "35m", "alertname": "SparkmirrorReconcileErrors", "exp_alerts": [
                 alert(spec, "SparkmirrorReconcileErrors", "The sparkmirror operator fails to reconcile",
                       namespace=RELEASE_NS)]}]},
        # no operator target at all (not discovered, or its pods gone)
        {"input_series": [{"series": f'up{{job="{DRIVERS}", namespace="ns", pod="d1"}}', "values": "1x20"}],
         "alert_rule_test": [
             {"eval_time": "3m", "alertname": "SparkmirrorOperatorDown", "exp_alerts": []},
             {"eval_time": "10m", "alertname": "SparkmirrorOperatorDown", "exp_alerts": [
                 alert(spec, "SparkmirrorOperatorDown", f"The sparkmirror operator in {RELEASE_NS} is down",
                       job=OPERATOR, namespace=RELEASE_NS)]}]},
    ]


def run_promtool(promtool: Path, tmp_path: Path, spec: dict, tests: list[dict]) -> subprocess.CompletedProcess:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m",
                                                         "tests": [{"interval": "1m", **t} for t in tests]}))
    return subprocess.run([str(promtool), "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)


def test_each_alert_fires_and_stays_quiet_as_it_should(promtool: Path, tmp_path: Path) -> None:
    spec = rules()
    tested = cases(spec)
    alerts = set(descriptions(spec))
    firing = {t["alertname"] for c in tested for t in c["alert_rule_test"] if t["exp_alerts"]}
    quiet = {t["alertname"] for c in tested for t in c["alert_rule_test"] if not t["exp_alerts"]}
    assert firing == quiet == alerts, "every alert is shown firing and not firing"
    out = run_promtool(promtool, tmp_path, spec, tested)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_test_fails_when_an_alert_does_not_page(promtool: Path, tmp_path: Path) -> None:
    """The harness itself: the old SparkmirrorMirrorGone (it cleared itself at 10 minutes) fails the case that
    expects it to stay firing, so a passing run means the rule, not a lenient test."""
    spec = rules()
    gone = next(r for g in spec["groups"] for r in g["rules"] if r["alert"] == "SparkmirrorMirrorGone")
    gone["expr"] = ("max by (resource_namespace, resource, flow_group) (label_replace(sparkmirror_mirror_up offset 10m,"
                    ' "resource_namespace", "$1", "namespace", "(.*)")) unless on (resource_namespace, resource, '
                    'flow_group) label_replace(max by (namespace, resource, flow_group) (sparkmirror_mirror_up), '
                    '"resource_namespace", "$1", "namespace", "(.*)")')
    out = run_promtool(promtool, tmp_path, spec, [c for c in cases(spec)
                                                  if any(t["alertname"] == "SparkmirrorMirrorGone"
                                                         for t in c["alert_rule_test"])])
    assert out.returncode != 0 and "SparkmirrorMirrorGone" in out.stdout + out.stderr, out.stdout + out.stderr


def test_thresholds_come_from_the_values(promtool: Path) -> None:
    spec = rules("--set", "metrics.prometheusRule.noCommitMinutes=3", "--set",
                 "metrics.prometheusRule.timeLagMinutes=7", "--set", "metrics.prometheusRule.mirrorGoneMinutes=4")
    by = {r["alert"]: r for g in spec["groups"] for r in g["rules"]}
    assert "> 180" in by["SparkmirrorPartitionStalled"]["expr"] and "> 420" in by["SparkmirrorTimeLag"]["expr"]
    assert by["SparkmirrorMirrorGone"]["for"] == "4m"


def test_promtool_checks_the_rules_and_the_dashboard_queries(promtool: Path, tmp_path: Path) -> None:
    """`promtool check rules` on the rendered PrometheusRule's spec, and on every dashboard query as a recording
    rule (Grafana's variables replaced by what they expand to), so each one is PromQL Prometheus accepts."""
    spec = rules()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec))
    subst = {"$__rate_interval": "1m", "$namespace": ".*", "$flow_group": ".*", "$mirror": ".*"}

    def expand(expr: str) -> str:
        for k, v in subst.items():
            expr = expr.replace(k, v)
        return expr

    queries = tmp_path / "dashboard.yaml"
    queries.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": [
        {"record": f"sparkmirror:dashboard:q{i}", "expr": expand(e)} for i, e in enumerate(dashboard_exprs())]}]}))
    out = subprocess.run([str(promtool), "check", "rules", str(tmp_path / "rules.yaml"), str(queries)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    n = sum(len(g["rules"]) for g in spec["groups"])
    assert n == 8 and f"SUCCESS: {n} rules found" in out.stdout
    assert f"SUCCESS: {len(dashboard_exprs())} rules found" in out.stdout
