"""The operator's image installs pyproject's base dependencies and its `operator` extra, nothing else (Dockerfile,
`--target operator`). Checked without Docker: a Python whose every other distribution is blocked imports what
the operator runs, spec.failover's lazy imports included, and share groups are carried there (kafka-python's
wire, `sparkmirror.wire`, without the batch path `sparkmirror.copying` or its dependencies)."""
from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
OURS = {"sparkmirror", "sparkmirror_operator", "sparkmirror_dev", "tests", "bench"}

# what the image runs: the operator's entry point and handlers, then spec.failover's lazy imports (the failover
# steps, `checkpoints.CheckpointEmitter.shares`)
PROBE = r"""
import importlib.abc, json, sys

blocked = set(json.loads(sys.argv[1]))


class NotInTheImage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the operator's image)", name=name)
        return None


sys.meta_path.insert(0, NotInTheImage())
import sparkmirror.cli, sparkmirror_operator.cli, sparkmirror_operator.handlers, sparkmirror_operator.failover
import sparkmirror.failover.run, sparkmirror.failover.stop
from sparkmirror.checkpoints import CheckpointEmitter
from sparkmirror.sharegroups.sync import ShareGroupSync
print(json.dumps(sorted(sys.modules)))
"""


def _operator_image_distributions() -> set[str]:
    """The distributions pip installs for the operator's image: the requirements the Dockerfile names, with
    theirs, markers evaluated for this Python."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    todo = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["operator"]]
    seen: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        for sub in md.requires(req.name) or []:
            r = Requirement(sub)
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(r)
    return seen


def test_the_operator_imports_and_carries_share_groups_with_its_image_alone() -> None:
    image = _operator_image_distributions()
    assert "kafka-python" in image  # the share-group admin's wire
    modules = md.packages_distributions()
    blocked = sorted({m for m, dists in modules.items()
                      if m not in OURS and not any(canonicalize_name(d) in image for d in dists)} | {"sparkmirror_dev"})
    assert {"pyspark", "aiokafka", "crc32c", "pyarrow"} <= set(blocked)  # the job's, present here
    env = {"PYTHONPATH": f"{REPO / 'spark-app'}:{REPO / 'operator'}", "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", PROBE, json.dumps(blocked)], capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded = set(json.loads(res.stdout))
    assert "sparkmirror.wire.cluster" in loaded and "sparkmirror.sharegroups.admin" in loaded
    assert not {m for m in loaded if m == "sparkmirror.copying" or m.startswith("sparkmirror.copying.")}


def test_the_probe_notices_a_module_outside_the_image() -> None:
    """The blocking itself: the batch path's package, imported where only the operator's image is, fails."""
    blocked = ["aiokafka", "crc32c", "pyspark"]
    probe = PROBE.replace("from sparkmirror.sharegroups.sync import ShareGroupSync",
                          "import sparkmirror.copying")
    env = {"PYTHONPATH": f"{REPO / 'spark-app'}:{REPO / 'operator'}", "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", probe, json.dumps(blocked)], capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode != 0 and "not in the operator's image" in res.stderr, res.stderr[-2000:]
