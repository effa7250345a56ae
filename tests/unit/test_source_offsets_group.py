"""`sourceOffsetsGroup` on a resource's mirror reaches the job's mirror config (no MM2 key maps to it); an empty
name is refused naming the field."""
from __future__ import annotations

from sparkmirror.resource.plan import plan


def resource(**mirror) -> dict:
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "m", "namespace": "ns"},
            "spec": {"target": {"alias": "b", "bootstrapServers": "b:9092"},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": "a:9092"}, **mirror}]}}


def test_the_group_reaches_the_job_config() -> None:
    p = plan(resource(sourceOffsetsGroup="sparkmirror-a-to-b"))
    assert p.errors == []
    (mirror,) = [m for g in p.groups for m in g.mirrors]
    assert mirror.sourceOffsetsGroup == "sparkmirror-a-to-b"


def test_off_by_default() -> None:
    p = plan(resource())
    assert [m.sourceOffsetsGroup for g in p.groups for m in g.mirrors] == [None]


def test_an_empty_name_is_named() -> None:
    p = plan(resource(sourceOffsetsGroup=""))
    assert any("sourceOffsetsGroup" in str(e) for e in p.errors), p.errors
