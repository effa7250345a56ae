"""What `sparkmirror run` takes of spec.autoscaling from a resource file: the spec per flow group when enabled,
and local task threads for the most lanes it may run."""
from __future__ import annotations

import yaml

from sparkmirror.runner.local import default_master
from sparkmirror.runner.resources import load


def _resource(path, autoscaling: dict) -> str:
    doc = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2", "metadata": {"name": "m"},
           "spec": {"target": {"alias": "b", "bootstrapServers": "localhost:1"},
                    "mirrors": [{"source": {"alias": "a", "bootstrapServers": "localhost:2"}, "topicsPattern": "t"}],
                    "spark": {"parallelism": 1}, "autoscaling": autoscaling}}
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_autoscaling_per_flow_group_when_enabled(tmp_path) -> None:
    loaded = load([_resource(tmp_path / "on.yaml", {"maxLanes": 5, "targetRecordsPerSecondPerLane": 100})])
    assert [c.name for c in loaded.configs] == ["a"]
    spec = loaded.autoscaling["a"]
    assert (spec.minLanes, spec.maxLanes, spec.targetRecordsPerSecondPerLane) == (1, 5, 100)
    assert default_master(loaded.configs) == "local[4,4]"
    assert default_master(loaded.configs, {g: s.maxLanes for g, s in loaded.autoscaling.items()}) == "local[12,4]"
    off = load([_resource(tmp_path / "off.yaml", {"enabled": False, "maxLanes": 5})])
    assert off.autoscaling == {} and [c.name for c in off.configs] == ["a"]
