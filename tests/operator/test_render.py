"""The model layer: resource YAML in, desired objects YAML out (golden files in data/render/).

Regenerate the expected files after an intended change with SPARKMIRROR_UPDATE_GOLDEN=1 and review the diff.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from sparkmirror.flowgroup import FlowGroupConfig
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
    assert kinds == [("ServiceAccount", "dc-mirror-spark"), ("Role", "dc-mirror-spark"),
                     ("RoleBinding", "dc-mirror-spark"),
                     ("ConfigMap", "dc-mirror-east-orders-config"), ("Lease", "dc-mirror-east-orders"),
                     ("SparkApplication", "dc-mirror-east-orders"),
                     ("ConfigMap", "dc-mirror-west-config"), ("Lease", "dc-mirror-west"),
                     ("SparkApplication", "dc-mirror-west")]
    apps = {o["metadata"]["name"]: o for o in objs if o["kind"] == "SparkApplication"}
    east = apps["dc-mirror-east-orders"]["spec"]
    assert east["suspend"] is True and east["restartPolicy"]["type"] == "Always"
    assert east["executor"]["instances"] == 3 and apps["dc-mirror-west"]["spec"]["executor"]["instances"] == 2
    # each group mounts exactly the Secrets its clusters refer to
    assert sorted(v["secret"]["secretName"] for v in east["volumes"] if "secret" in v) == \
        ["central-ca", "east-user", "mirror-user"]
    west = apps["dc-mirror-west"]["spec"]
    assert sorted(v["secret"]["secretName"] for v in west["volumes"] if "secret" in v) == ["central-ca", "mirror-user"]
    cms = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    cfg = FlowGroupConfig.from_yaml(cms["dc-mirror-east-orders-config"]["data"]["flowgroup.yaml"])
    assert cfg.mirrors[0].lanes == 8 and cfg.lanes == 4
    assert cfg.cluster("central").authentication.password.file == "/etc/sparkmirror/secrets/mirror-user/password"
    assert cfg.worker.leaseName == "dc-mirror-east-orders"
    role = next(o for o in objs if o["kind"] == "Role")
    lease_rule = next(r for r in role["rules"] if r["apiGroups"] == ["coordination.k8s.io"])
    assert lease_rule["resourceNames"] == ["dc-mirror-east-orders", "dc-mirror-west"]
    assert "create" not in lease_rule["verbs"] and not any("secrets" in r["resources"] for r in role["rules"])


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
            "valueFrom": {"secretKeyRef": {"name": "mirror-user", "key": "password"}}} in app["spec"]["driver"]["env"]
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    cfg = FlowGroupConfig.from_yaml(cm["data"]["flowgroup.yaml"])
    assert cfg.cluster("central").authentication.password.env == "SPARKMIRROR_SECRET_MIRROR_USER_PASSWORD"
    # only what the config reads from the environment: certificates and keys stay mounted files
    for a in (o for o in objs if o["kind"] == "SparkApplication"):
        for role in ("driver", "executor"):
            assert [e["name"] for e in a["spec"][role]["env"]] == ["SPARKMIRROR_SECRET_MIRROR_USER_PASSWORD"]


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
            "valueFrom": {"secretKeyRef": {"name": "mirror-user", "key": "sasl.key"}}} in app["spec"]["driver"]["env"]
