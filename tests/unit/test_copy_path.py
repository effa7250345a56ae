"""`copy: records | batches` from the resource to the lanes: the spec's choice, a flow group's own, and the
mirrors that fall back to records (the identity policy), said the same way by the lanes and by `plan`."""
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


def test_records_unless_asked() -> None:
    for g in flow_group_configs(_resource()):
        assert g.copy_path == CopyPath.RECORDS and copy_path_of(g, g.mirrors[0]) == (CopyPath.RECORDS, "")


def test_the_spec_and_a_flow_group_choose_and_identity_falls_back_with_a_reason() -> None:
    groups = {g.name: g for g in flow_group_configs(_resource(
        copy="batches", flowGroups=[{"name": "ident", "mirrors": ["c"], "copy": "batches"},
                                    {"name": "rec", "mirrors": ["a"], "copy": "records"}]))}
    assert groups["rec"].copy_path == CopyPath.RECORDS
    ident = groups["ident"]
    path, why = copy_path_of(ident, ident.mirrors[0])
    assert path == CopyPath.RECORDS and "identity replication policy" in why
    (one,) = flow_group_configs(_resource(copy="batches", mirrors=_resource()["spec"]["mirrors"][:1]))
    assert copy_path_of(one, one.mirrors[0]) == (CopyPath.BATCHES, "")
    assert "copy: batches" in one.to_yaml()


def test_an_unknown_path_is_refused_by_name() -> None:
    with pytest.raises(ResourceInvalid, match="copy"):
        flow_group_configs(_resource(copy="bytes"))
