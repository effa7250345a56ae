"""CLI habits, through the real `sparkmirror` command (subprocess): --version, and -o json|yaml wherever a
command prints state, parsing as what it says it is, with nothing else on stdout."""
from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import yaml

RESOURCE = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "m", "namespace": "local"},
            "spec": {"target": {"alias": "b", "bootstrapServers": "127.0.0.1:2"},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": "127.0.0.1:1"}, "topicsPattern": "t.*",
                                  "sourceConnector": {"config": {"tasks.max": 4}}}]}}
MM2 = "clusters = east, central\neast.bootstrap.servers = east:9092\ncentral.bootstrap.servers = central:9092\n" \
      "east->central.enabled = true\neast->central.topics = orders.*\n"


def sparkmirror(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparkmirror.cli", *args], capture_output=True, text=True,
                          timeout=120, input=stdin)


def test_version() -> None:
    out = sparkmirror("--version")
    assert out.returncode == 0 and out.stdout == f"sparkmirror {version('sparkmirror')}\n", out


def test_run_check_as_json_and_yaml(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump(RESOURCE))
    js = sparkmirror("run", "--check", "-f", str(f), "-o", "json")
    ym = sparkmirror("run", "--check", "-f", str(f), "-o", "yaml")
    assert js.returncode == 0 and ym.returncode == 0, (js, ym)
    data = json.loads(js.stdout)
    assert yaml.safe_load(ym.stdout) == data
    (group,) = data["flowGroups"]
    assert group["name"] == "a" and group["resource"] == "local/m" and group["delivery"] == "exactly-once"
    assert [(m["source"], m["target"], m["topics"]) for m in group["mirrors"]] == [("a", "b", "t.*")]
    # warnings are part of the state, and still on stderr for a person
    assert any("tasksMax" in w or "tasks.max" in w for w in data["warnings"]), data["warnings"]
    assert "warning:" in js.stderr
    bad = sparkmirror("run", "--check", "-f", str(f), "-o", "xml")
    assert bad.returncode == 2 and "invalid choice: 'xml'" in bad.stderr


def test_import_as_json_and_yaml(tmp_path: Path) -> None:
    js = sparkmirror("import", "-", "--name", "dc", "-o", "json", stdin=MM2)
    ym = sparkmirror("import", "-", "--name", "dc", stdin=MM2)
    assert js.returncode == 0 and ym.returncode == 0, (js, ym)
    resource = json.loads(js.stdout)
    assert resource == yaml.safe_load(ym.stdout)
    assert resource["kind"] == "KafkaMirrorMaker2" and resource["metadata"]["name"] == "dc"
    assert [m["source"]["alias"] for m in resource["spec"]["mirrors"]] == ["east"]
    written = tmp_path / "dc.json"
    assert sparkmirror("import", "-", "--name", "dc", "-o", "json", "--output-file", str(written),
                       stdin=MM2).stdout == ""
    assert json.loads(written.read_text()) == resource


def test_dev_status_as_yaml(tmp_path: Path) -> None:
    import os

    env = {**os.environ, "SPARKMIRROR_DEV_HOME": str(tmp_path / "dev")}
    out = subprocess.run([sys.executable, "-m", "sparkmirror.cli", "dev", "status", "-o", "yaml"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0 and yaml.safe_load(out.stdout) == {}, out
