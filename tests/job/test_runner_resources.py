"""Resource files -> flow groups (no Kafka, no Spark) and the progress table."""
from __future__ import annotations

import pytest
import yaml

from sparkmirror.runner.display import lines
from sparkmirror.runner.local import MirrorView
from sparkmirror.runner.resources import InvalidResource, load


def res(**spec) -> dict:
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "m", "namespace": "local"},
            "spec": {"target": {"alias": "b", "bootstrapServers": "127.0.0.1:2"},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": "127.0.0.1:1"},
                                  "topicsPattern": "orders.*,payments"}], **spec}}


def test_load_several_documents_and_fields(tmp_path) -> None:
    second = res()
    second["metadata"]["name"] = "back"
    second["spec"]["target"], second["spec"]["mirrors"][0]["source"] = (
        {"alias": "a", "bootstrapServers": "127.0.0.1:1"}, {"alias": "b", "bootstrapServers": "127.0.0.1:2"})
    f = tmp_path / "two.yaml"
    f.write_text(yaml.safe_dump_all([res(), second]))
    loaded = load([str(f)])
    assert [(c.name, c.mirrors[0].source, c.mirrors[0].target) for c in loaded.configs] == [("a", "a", "b"),
                                                                                          ("b", "b", "a")]
    assert loaded.configs[0].mirrors[0].topics == "(?:orders.*)|(?:payments)"  # MM2 comma list: one regex
    assert loaded.configs[0].worker.leaseName is None                   # no Kubernetes Lease in local runs
    assert loaded.fields["a"] == {"b": "spec.target.bootstrapServers", "a": "spec.mirrors[0].source.bootstrapServers"}


def test_connect_only_fields_are_warnings_not_silence(tmp_path) -> None:
    r = res()
    r["spec"]["mirrors"][0]["sourceConnector"] = {"tasksMax": 4, "config": {"offset-syncs.topic.location": "target"}}
    f = tmp_path / "r.yaml"
    f.write_text(yaml.safe_dump(r))
    warnings = load([str(f)]).warnings
    assert any("tasksMax" in w for w in warnings) and any("offset-syncs.topic.location" in w for w in warnings), warnings


def test_errors_name_file_and_field(tmp_path) -> None:
    r = res()
    r["spec"]["mirrors"][0]["source"]["alias"] = "b"
    f = tmp_path / "same.yaml"
    f.write_text(yaml.safe_dump(r))
    with pytest.raises(InvalidResource, match=r"same.yaml: spec.mirrors\[0\].source.alias: must differ"):
        load([str(f)])
    r = res()
    r["apiVersion"] = "kafka.strimzi.io/v1"
    f.write_text(yaml.safe_dump(r))
    with pytest.raises(InvalidResource, match="apiVersion: expected 'sparkmirror.io/v1alpha1'"):
        load([str(f)])
    with pytest.raises(InvalidResource, match="missing.yaml: no such file"):
        load([str(tmp_path / "missing.yaml")])


def test_progress_lines() -> None:
    views = [MirrorView("east", "east", "east", "central", 3, 9, 12500.0, 2.5e6, 0, 60000, {}),
             MirrorView("west", "west", "west", "central", 1, 2, 0.0, 0.0, 120, 0, {}),
             MirrorView("x", "x", "x", "central", 0, 0, 0.0, 0.0, None, 0, {"monitor": "unreachable"})]
    out = lines(views, {"west": "CopyError: record too large"})
    assert out[0].split()[:3] == ["FLOW", "GROUP", "MIRROR"]
    assert "east -> central" in out[1] and "12.5k" in out[1] and "2.5 MB" in out[1] and out[1].endswith("caught up")
    assert out[2].endswith("error: CopyError: record too large")
    assert out[3].endswith("error: unreachable")


def test_preflight_names_the_field_of_a_missing_certificate(tmp_path) -> None:
    from sparkmirror.resource.flowgroup import Cluster, FlowGroupConfig, Mirror, Tls
    from sparkmirror.runner.local import Unreachable, preflight

    cfg = FlowGroupConfig(name="g", clusters=[
        Cluster(alias="b", bootstrapServers="127.0.0.1:2", tls=Tls(caFiles=[str(tmp_path / "none" / "*.crt")])),
        Cluster(alias="a", bootstrapServers="127.0.0.1:1", tls=Tls(caFiles=[str(tmp_path / "ca.crt")]))],
        mirrors=[Mirror(name="a", source="a", target="b")])
    with pytest.raises(Unreachable) as e:
        preflight([cfg], {"g": {"b": "spec.target.bootstrapServers"}}, timeout=1)
    msg = str(e.value)
    assert "spec.target.bootstrapServers: cluster 'b': tls.caFiles: no certificate file matches" in msg
    assert "clusters[a].bootstrapServers: cluster 'a'" in msg and "ssl.ca.location" in msg  # librdkafka's word


def test_waiting_shows_in_lines_stats_and_metrics() -> None:
    """A lane that ended its epoch waiting for its target: the stats, the display and the metrics say so."""
    import time

    from sparkmirror.copying import PartitionSummary
    from sparkmirror.metrics import prometheus_text
    from sparkmirror.stats import MirrorStats

    since = time.time() - 35
    row = PartitionSummary("m", 0, "t", 0, "a.t", epoch_start_ms=1, epoch_end_ms=2,
                           waiting="target cluster 'b' unreachable", waiting_since_ms=int(since * 1000))
    stats = MirrorStats("m")
    stats.update([vars(row)])
    snap = stats.snapshot()
    assert snap["waiting"] == "target cluster 'b' unreachable" and abs(snap["waiting_since"] - since) < 0.01
    view = MirrorView("g", "m", "a", "b", 1, 1, 0.0, 0.0, 5, 0, {}, snap["waiting"], snap["waiting_since"])
    assert lines([view])[1].endswith("waiting: target cluster 'b' unreachable for 35 s")
    services = {"m": {"source": "a", "target": "b", "partitions_detail": [], "lag": None, "records_per_s": 0.0,
                      "bytes_per_s": 0.0, "topics": 1, "partitions": 1, "errors": {}, "heartbeats": 0,
                      "checkpoint_groups": 0, "waiting": snap["waiting"], "waiting_since": since}}
    text = prometheus_text("g", services)
    assert 'sparkmirror_mirror_stalled{flow_group="g",mirror="m",source="a",target="b"} 1.0' in text
    assert 'sparkmirror_mirror_up{flow_group="g",mirror="m",source="a",target="b"} 0.0' in text
    stalled_s = float(next(ln for ln in text.splitlines() if ln.startswith("sparkmirror_mirror_stalled_seconds{"))
                      .split()[-1])
    assert 34 <= stalled_s < 60
    stats.update([vars(PartitionSummary("m", 0, "t", 0, "a.t", epoch_start_ms=2, epoch_end_ms=3))])
    assert stats.snapshot()["waiting"] is None  # the next epoch that waited for nothing clears it
