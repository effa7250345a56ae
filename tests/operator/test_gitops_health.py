"""What GitOps tools make of the operator's status: the Argo CD health check shipped in gitops/ (run in gopher-lua,
Argo CD's own Lua runtime, with the libraries Argo CD opens for a custom check) and Flux's kstatus (the
sigs.k8s.io/cli-utils library, built from its Go module) read the same sample resources, whose statuses come
from `build_status` itself.

The samples are committed as Argo CD test data (gitops/argocd/.../testdata, checked against `health_test.yaml`
in Argo CD's own layout); regenerate them after an intended status change with SPARKMIRROR_UPDATE_GOLDEN=1.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkmirror.resource.plan import plan
from sparkmirror_dev import install
from sparkmirror_operator.lag import GroupLag
from sparkmirror_operator.status import Problem, build_status

HEALTH = Path(__file__).resolve().parents[2] / "gitops" / "argocd" / "sparkmirror.io" / "KafkaMirrorMaker2"
NOW = "2026-01-01T00:00:00Z"

RES: dict[str, Any] = {
    "apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
    "metadata": {"name": "m", "namespace": "ns", "generation": 3},
    "spec": {"version": "2.0", "target": {"alias": "b", "bootstrapServers": "b:9092"},
             "mirrors": [{"source": {"alias": "a", "bootstrapServers": "a:9092"}}]},
}


def _app(state: str, error: str | None = None) -> dict:
    return {"status": {"applicationState": {"state": state, **({"errorMessage": error} if error else {})}}}


def _resource(**spec: Any) -> dict:
    r = copy.deepcopy(RES)
    r["spec"].update(spec)
    return r


# sample name -> (resource, observed applications, problems, generation the status was written for)
SAMPLES: dict[str, tuple[dict, dict, list[Problem], int | None]] = {
    "starting": (RES, {"a": _app("SUBMITTED")}, [], 3),
    "running": (RES, {"a": _app("RUNNING")}, [], 3),
    "spec-not-yet-observed": (RES, {"a": _app("RUNNING")}, [], 2),
    "invalid-spec": (_resource(mirrors=[{"source": {"alias": "b", "bootstrapServers": "a:9092"}}]), {}, [], 3),
    "secret-missing": (RES, {"a": _app("SUBMITTED")},
                       [Problem("SecretMissing", "Secret ns/creds referenced by spec.target.authentication."
                                                 "passwordSecret: not found")], 3),
    "application-failed": (RES, {"a": _app("FAILED", "driver exited with code 1")}, [], 3),
    "cluster-unreachable": (RES, {"a": _app("RUNNING")},
                            [Problem("ClusterUnreachable", "spec.target.bootstrapServers: target cluster 'b' "
                                                           "(b:9092) is unreachable")], 3),
    "pausing": (_resource(state="paused"), {"a": _app("RUNNING")}, [], 3),
    "paused": (_resource(state="paused"), {"a": _app("SUSPENDED")}, [], 3),
    "stopped": (_resource(state="stopped"), {}, [], 3),
}

# what kstatus (Flux's health checks, kpt) says of each sample, and of a resource without status. Paused and
# stopped stay InProgress there: kstatus falls back to Ready, which is False unless mirroring.
KSTATUS = {"no-status": "Current", "starting": "InProgress", "running": "Current",
           "spec-not-yet-observed": "InProgress", "invalid-spec": "Failed", "secret-missing": "Failed",
           "application-failed": "Failed", "cluster-unreachable": "InProgress", "pausing": "InProgress",
           "paused": "InProgress", "stopped": "InProgress"}


def sample(name: str) -> dict:
    """A resource as the API server would hold it after the operator wrote its status."""
    if name == "no-status":
        return copy.deepcopy(RES)
    res, apps, problems, observed = SAMPLES[name]
    obj = copy.deepcopy(res)
    lags = {"a": GroupLag(lag=0, partitions=3)} if apps.get("a", {}).get("status", {}).get(
        "applicationState", {}).get("state") == "RUNNING" else None
    obj["status"] = build_status(name="m", generation=observed, plan=plan(res), apps=apps, lags=lags,
                                 problems=problems, old=None, now=NOW)
    return obj


def test_samples_are_what_the_operator_writes() -> None:
    """The committed test data is build_status' output; a status change shows up here first."""
    update = os.environ.get("SPARKMIRROR_UPDATE_GOLDEN") == "1"
    for name in ["no-status", *SAMPLES]:
        path = HEALTH / "testdata" / f"{name}.yaml"
        want = sample(name)
        if update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(want, sort_keys=False, width=120))
        assert yaml.safe_load(path.read_text()) == want, f"{path} is stale: rerun with SPARKMIRROR_UPDATE_GOLDEN=1"


def run_health_checks(argocdlua: Path, objs: list[dict], script: Path = HEALTH / "health.lua") -> list[dict]:
    """The script run as Argo CD's controller runs it (`dev/sparkmirror_dev/argocdlua`): `obj` global, the returned
    table's status and message, or the error Argo CD would report."""
    lines = "".join(json.dumps(o) + "\n" for o in objs)
    out = subprocess.run([str(argocdlua), str(script)], input=lines, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.fixture(scope="module")
def argocdlua() -> Path:
    return install.argocd_lua()


@pytest.fixture(scope="module")
def kstatus() -> Path:
    return install.kstatus()


def test_argocd_health_check_reads_the_samples(argocdlua: Path) -> None:
    tests = yaml.safe_load((HEALTH / "health_test.yaml").read_text())["tests"]
    assert {Path(t["inputPath"]).stem for t in tests} == {"no-status", *SAMPLES}
    objs = [yaml.safe_load((HEALTH / t["inputPath"]).read_text()) for t in tests]
    got = run_health_checks(argocdlua, objs)
    for t, g in zip(tests, got, strict=True):
        assert g == t["healthStatus"], t["inputPath"]


def test_the_runtime_is_argo_cds_not_a_full_lua(argocdlua: Path, tmp_path: Path) -> None:
    """What would pass in a full Lua but not in Argo CD fails here too: a custom check gets no `string` library
    (nor a string metatable, nor io); a status Argo CD does not know reads as Unknown; a loop is stopped."""
    obj = yaml.safe_load((HEALTH / "testdata" / "running.yaml").read_text())
    cases = {"string.lua": 'return {status = "Healthy", message = string.format("%d", 1)}',
             "method.lua": 'local s = "ab"\nreturn {status = "Healthy", message = s:upper()}',
             "io.lua": 'io.write("x")\nreturn {status = "Healthy"}',
             "bad-status.lua": 'return {status = "Fine", message = "ok"}',
             "loop.lua": 'while true do end',
             "ok.lua": 'return {status = "Healthy", message = obj.metadata.name .. " " .. #obj.status.conditions '
                       '.. " " .. tostring(obj.metadata.generation == obj.status.observedGeneration)}'}
    got = {}
    for name, text in cases.items():
        (tmp_path / name).write_text(text)
        (got[name],) = run_health_checks(argocdlua, [obj], tmp_path / name)
    assert all("error" in got[n] for n in ("string.lua", "method.lua", "io.lua", "loop.lua")), got
    assert got["bad-status.lua"] == {"status": "Unknown", "message": "Lua returned an invalid health status"}
    assert got["ok.lua"] == {"status": "Healthy", "message": f"m {len(obj['status']['conditions'])} true"}


def test_kstatus_reads_the_samples(kstatus: Path) -> None:
    names = list(KSTATUS)
    lines = "".join(json.dumps(yaml.safe_load((HEALTH / "testdata" / f"{n}.yaml").read_text())) + "\n"
                    for n in names)
    out = subprocess.run([str(kstatus)], input=lines, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    got = {n: json.loads(line) for n, line in zip(names, out.stdout.splitlines())}
    assert {n: r["status"] for n, r in got.items()} == KSTATUS, got
    # Failed carries the Stalled message, so `flux get` says what to fix
    assert "Secret ns/creds" in got["secret-missing"]["message"]
    assert "generation is 3, but latest observed generation is 2" in got["spec-not-yet-observed"]["message"]
