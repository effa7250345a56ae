"""`copy: records | batches` from the resource to the lanes: the spec's choice, a flow group's own, the default
(batches), and the mirrors that fall back to records (the identity policy; per-client settings only records
honour, where `copy` was left unset), said the same way by the lanes, by `plan` and by the metrics."""
from __future__ import annotations

import pytest

from sparkmirror.copypath import copy_path_of
from sparkmirror.resource.flowgroup import CopyPath
from sparkmirror.resource.plan import ResourceInvalid, flow_group_configs


def _resource(**spec_over) -> dict:
    spec = {"version": "1.0", "target": {"alias": "b", "bootstrapServers": "127.0.0.1:9093"},
            "mirrors": [{"source": {"alias": "a", "bootstrapServers": "127.0.0.1:9092"}, "topicsPattern": "x.*"},
                        {"source": {"alias": "c", "bootstrapServers": "127.0.0.1:9094"}, "topicsPattern": "y.*",
                         "sourceConnector": {"config": {"replication.policy.class":
                                                        "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"}}}]}
    spec.update(spec_over)
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "m", "namespace": "ns"}, "spec": spec}


def test_batches_unless_asked_otherwise() -> None:
    for g in flow_group_configs(_resource(mirrors=_resource()["spec"]["mirrors"][:1])):
        assert g.copy_path == CopyPath.BATCHES and copy_path_of(g, g.mirrors[0]) == (CopyPath.BATCHES, "", "")
    (rec,) = flow_group_configs(_resource(copy="records", mirrors=_resource()["spec"]["mirrors"][:1]))
    assert copy_path_of(rec, rec.mirrors[0]) == (CopyPath.RECORDS, "", "")


def test_settings_only_records_honour_choose_records_when_copy_is_left_unset() -> None:
    """A resource that worked before batches became the default keeps working: its group copies records and says
    which fields made it so; asking for batches refuses the same fields by name."""
    one = _resource()["spec"]["mirrors"][:1]
    target = {"alias": "b", "bootstrapServers": "127.0.0.1:9093", "config": {"compression.type": "zstd"}}
    (g,) = flow_group_configs(_resource(mirrors=one, target=target))
    choice = copy_path_of(g, g.mirrors[0])
    assert choice.path == CopyPath.RECORDS and choice.fallback == "client_settings"
    assert "spec.target.config[compression.type] is honoured by the record path only" in choice.why
    assert "copyFallback" in g.to_yaml()
    with pytest.raises(ResourceInvalid, match=r"spec.target.config\[compression.type\]"):
        flow_group_configs(_resource(mirrors=one, target=target, copy="batches"))
    # the Fetch keys the batch path honours do not make it fall back
    honoured = [{**one[0], "sourceConnector": {"config": {"consumer.fetch.max.bytes": "1048576"}}}]
    (h,) = flow_group_configs(_resource(mirrors=honoured))
    assert copy_path_of(h, h.mirrors[0]).path == CopyPath.BATCHES


def test_the_spec_and_a_flow_group_choose_and_identity_falls_back_with_a_reason() -> None:
    groups = {g.name: g for g in flow_group_configs(_resource(
        copy="batches", flowGroups=[{"name": "ident", "mirrors": ["c"], "copy": "batches"},
                                    {"name": "rec", "mirrors": ["a"], "copy": "records"}]))}
    assert groups["rec"].copy_path == CopyPath.RECORDS
    ident = groups["ident"]
    path, why, fallback = copy_path_of(ident, ident.mirrors[0])
    assert path == CopyPath.RECORDS and "identity replication policy" in why and fallback == "identity_policy"
    (one,) = flow_group_configs(_resource(copy="batches", mirrors=_resource()["spec"]["mirrors"][:1]))
    assert copy_path_of(one, one.mirrors[0]) == (CopyPath.BATCHES, "", "")
    assert "copy: batches" in one.to_yaml()


def test_an_unknown_path_is_refused_by_name() -> None:
    with pytest.raises(ResourceInvalid, match="copy"):
        flow_group_configs(_resource(copy="bytes"))
