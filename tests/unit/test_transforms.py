"""Record transforms (issue 38): each built-in and a Python callable on records, their refusals naming the field,
the MM2 `transforms` keys pointed at the field, and offset translation across dropped records (a position on a
dropped record lands on the next kept one)."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from sparkmirror.copypath import copy_path_of
from sparkmirror.progress import OffsetMap, ProgressRecord
from sparkmirror.resource.flowgroup import CopyPath, Mirror
from sparkmirror.resource.plan import plan
from sparkmirror.transforms import RecordTransforms, TransformFailed, TransformRefused, check, compiled


def chain(*transforms: dict) -> RecordTransforms:
    m = Mirror(name="a", source="a", target="b", transforms=list(transforms))
    c = compiled(m)
    assert c is not None
    return c


def run(c: RecordTransforms, key=b"k", value=b"v", headers=None, off=0):
    return c.apply("t", 0, off, 1000, key, value, headers)


def test_drop_records_by_header_name_value_and_key() -> None:
    by_name = chain({"type": "dropRecords", "header": "debug"})
    assert run(by_name, headers=[("debug", None)]) is None
    assert run(by_name, headers=[("other", b"x")]) == (b"k", b"v", [("other", b"x")])
    assert run(by_name, headers=None) == (b"k", b"v", None)
    by_value = chain({"type": "dropRecords", "header": "kind", "headerValue": "debug|trace"})
    assert run(by_value, headers=[("kind", b"trace")]) is None
    assert run(by_value, headers=[("kind", b"tracer")]) is not None  # whole value, as Java's matches()
    assert run(by_value, headers=[("kind", None)]) is not None
    by_key = chain({"type": "dropRecords", "key": r"tmp-\d+"})
    assert run(by_key, key=b"tmp-12") is None
    assert run(by_key, key=b"tmp-12x") is not None and run(by_key, key=None) is not None
    both = chain({"type": "dropRecords", "header": "kind", "key": "a.*"})  # every condition given
    assert run(both, key=b"ab", headers=[("kind", b"")]) is None
    assert run(both, key=b"b", headers=[("kind", b"")]) is not None
    assert run(both, key=b"ab") is not None
    assert by_key.counts.dropped == 1 and both.counts.dropped == 1


def test_drop_json_fields_nested_untouched_bytes_and_not_json() -> None:
    c = chain({"type": "dropJsonFields", "fields": ["secret", "customer.email", "absent.deep"]})
    v = json.dumps({"id": 1, "secret": "s", "customer": {"email": "e", "name": "n"}}).encode()
    _, out, _ = run(c, value=v)
    assert json.loads(out) == {"id": 1, "customer": {"name": "n"}}
    same = b'{ "id" : 1 ,  "x": [1, 2] }'  # nothing to remove: the very bytes, not a re-serialisation
    assert run(c, value=same)[1] is same
    assert run(c, value=b"not json")[1] == b"not json" and run(c, value=b"[1]")[1] == b"[1]"
    assert run(c, value=None)[1] is None
    assert c.counts.not_json == 2 and c.counts.dropped == 0


def test_rename_and_add_headers_keep_order_and_values() -> None:
    c = chain({"type": "renameHeader", "from": "trace", "to": "x-trace"},
              {"type": "addHeader", "name": "via", "value": "sparkmirror"})
    h = [("a", b"1"), ("trace", b"t1"), ("trace", None)]
    assert run(c, headers=h)[2] == [("a", b"1"), ("x-trace", b"t1"), ("x-trace", None), ("via", b"sparkmirror")]
    assert run(c, headers=None)[2] == [("via", b"sparkmirror")]
    assert h == [("a", b"1"), ("trace", b"t1"), ("trace", None)]  # the source record's list is not changed


def test_python_callable_keeps_changes_drops_in_order_with_the_others() -> None:
    c = chain({"type": "python", "callable": "tests.support.transformfns:tag_and_drop_elevens"},
              {"type": "python", "callable": "tests.support.transformfns:shout"})
    assert run(c, value=b'{"seq": 22}') is None
    k, v, h = run(c, value=b'{"seq": 5}', headers=[("a", b"1")])
    assert v == b'{"SEQ": 5}' and h == [("a", b"1"), ("py", b"10")]


def test_python_failures_name_the_record_and_refusals_name_the_field() -> None:
    with pytest.raises(TransformFailed, match=r"transforms\[0\] .*explode.* raised on t\[0\] offset 7: RuntimeError"):
        run(chain({"type": "python", "callable": "tests.support.transformfns:explode"}), off=7)
    with pytest.raises(TransformFailed, match="returned dict"):
        run(chain({"type": "python", "callable": "tests.support.transformfns:not_a_record"}))
    for spec, words in (("tests.support.nosuchmodule:f", "ModuleNotFoundError"),
                        ("tests.support.transformfns:missing", "AttributeError"),
                        ("tests.support.transformfns:NOT_CALLABLE", "is not callable")):
        m = Mirror(name="a", source="a", target="b", transforms=[{"type": "addHeader", "name": "x", "value": ""},
                                                                  {"type": "python", "callable": spec}])
        with pytest.raises(TransformRefused, match=rf"mirrors\[a\]\.transforms\[1\]\.callable: .*{words}"):
            check([type("Cfg", (), {"mirrors": [m]})()])


def _resource(transforms=None, config=None) -> dict:
    mirror = {"source": {"alias": "a", "bootstrapServers": "127.0.0.1:9092"}}
    if transforms is not None:
        mirror["transforms"] = transforms
    if config is not None:
        mirror["sourceConnector"] = {"config": config}
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2", "metadata": {"name": "m"},
            "spec": {"target": {"alias": "b", "bootstrapServers": "127.0.0.1:9093"}, "mirrors": [mirror],
                     "copy": "batches"}}


def test_resource_field_reaches_the_job_and_bad_input_names_the_field() -> None:
    p = plan(_resource([{"type": "dropRecords", "key": "x.*"}]))
    assert not p.errors
    (g,) = p.groups
    assert g.mirrors[0].transforms[0].key == "x.*"
    assert "transforms" in g.to_yaml()
    assert copy_path_of(g, g.mirrors[0]) == (CopyPath.BATCHES, "", "")  # touched batches rebuilt (transformbatch)
    assert "transforms" not in plan(_resource()).groups[0].to_yaml()  # absent: the config's hash unchanged
    for bad, where in (([{"type": "dropRecords", "key": "(["}], "transforms"),
                       ([{"type": "dropRecords"}], "transforms"),
                       ([{"type": "renameHeader", "from": "a"}], "to"),
                       ([{"type": "python", "callable": "no colon"}], "callable"),
                       ([{"type": "sqlFilter"}], "transforms")):
        errors = plan(_resource(bad)).errors
        assert errors and any(where in e.field and "spec.mirrors[0].transforms" in e.field for e in errors), errors
    with pytest.raises(ValidationError):
        Mirror(name="a", source="a", target="b", transforms=[{"type": "dropRecords", "headerValue": "x"}])


def test_mm2_transforms_keys_point_at_the_field() -> None:
    p = plan(_resource(config={"transforms": "drop", "transforms.drop.type": "x.Filter", "topics": "t.*"}))
    said = [u for u in p.unsupported if "transforms" in u]
    assert len(said) == 2 and all("use the mirror's own `transforms` field" in u for u in said)


def test_translation_lands_a_position_on_a_dropped_record_on_the_next_kept_one() -> None:
    """Source offsets 0..29 committed in three transactions; the transforms drop some, including a range's first
    and last records and a whole range. Every source offset translates to the target offset of the first kept
    record at or after it (counted with the same transforms, as sourcecounter.SourceCounter does on the source)."""
    c = chain({"type": "dropRecords", "header": "kind", "headerValue": "debug"},
              {"type": "dropRecords", "key": "7|13"})
    debug = {0, 4, 5, 9, 20, 21, 22, 23, 24}
    source = [(o, str(o).encode(), [("kind", b"debug" if o in debug else b"info")]) for o in range(30)]
    kept = [o for o, k, h in source if c.apply("t", 0, o, 0, k, b"", h) is not None]
    assert 7 not in kept and 13 not in kept and 0 not in kept and 9 not in kept
    target_of = {o: 500 + i for i, o in enumerate(kept)}  # the copier wrote the kept ones, consecutively
    ranges = [(0, 9), (10, 19), (20, 24), (25, 29)]  # (20, 24): every record dropped, nothing written
    m = OffsetMap()
    for first, last in ranges:
        written = [target_of[o] for o in kept if first <= o <= last]
        m.append(ProgressRecord("a", "t", 0, last + 1, first, last, "a.t", written[0] if written else -1,
                                written[-1] if written else -1, len(written), 0, 1))

    def inside(r, offset: int) -> int:
        return sum(1 for o, k, h in source if r.source_first <= o < offset
                   and c.apply("t", 0, o, 0, k, b"", h) is not None)

    for o in range(31):
        expected = next((target_of[k] for k in kept if k >= o), 500 + len(kept))
        assert m.translate(o, inside) == expected, o
    assert m.translate(21, inside) == target_of[25]  # inside the range that wrote nothing: the next kept record
    # and back: a consumer next to read target t continues on the source right after the last record it read
    # (the one before t): the records dropped in between are read there, none skipped, none repeated
    for o, t in target_of.items():
        first, _ = next(rg for rg in ranges if rg[0] <= o <= rg[1])
        before = [k for k in kept if first <= k < o]
        want = before[-1] + 1 if before else first
        assert m.translate_back(t, lambda r, n: [k for k in kept if r.source_first <= k <= r.source_last][n]) == want
    assert m.translate_back(target_of[8], None) == 0  # without the source counted: the range's start (repeats)


def _batch(seqs: range, codec: int = 0, base: int = 0):
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from sparkmirror.copying.batches import split_batches

    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0, producer_id=7,
                                  producer_epoch=0, base_sequence=0, batch_size=1 << 30)
    for i, s in enumerate(seqs):
        b.append(i, timestamp=1000 + s, key=f"k{s}".encode(), value=json.dumps({"seq": s, "secret": 1}).encode(),
                 headers=[("kind", b"debug" if s % 5 == 0 else b"info")])
    raw = bytearray(b.build())
    raw[0:8] = base.to_bytes(8, "big")  # the base offset the broker gave it
    (batch,) = split_batches(bytes(raw))
    return batch


def _records_of(batch):
    from aiokafka.record.default_records import DefaultRecordBatch

    return [(r.key, json.loads(r.value), list(r.headers), r.timestamp) for r in DefaultRecordBatch(bytearray(batch.raw))]


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])  # none, gzip, snappy, lz4, zstd
def test_batch_path_forwards_untouched_batches_and_rebuilds_touched_ones(codec: int) -> None:
    from sparkmirror.copying.transformbatch import transform_batch

    drop = chain({"type": "dropRecords", "header": "kind", "headerValue": "debug"})
    untouched = _batch(range(1, 5), codec, base=100)  # no seq % 5 == 0: the very batch, bytes as fetched
    t = transform_batch(untouched, drop, "t", 0, 100)
    assert t.batch is untouched and not t.touched and (t.source_first, t.source_last) == (100, 103)
    mixed = _batch(range(0, 12), codec, base=200)  # 0, 5, 10 dropped
    t = transform_batch(mixed, drop, "t", 0, 200)
    assert t.touched and t.batch.record_count == 9 and t.batch.codec == mixed.codec
    assert (t.source_first, t.source_last) == (200, 211)  # the range covers the dropped records too
    assert [r[0] for r in _records_of(t.batch)] == [f"k{s}".encode() for s in range(12) if s % 5]
    assert [r[3] for r in _records_of(t.batch)] == [1000 + s for s in range(12) if s % 5]  # the source's times
    assert transform_batch(_batch(range(0, 1), codec, base=300), drop, "t", 0, 300).batch is None
    # a resume inside a compressed batch: only the records at or past the position
    t = transform_batch(mixed, drop, "t", 0, 207)
    assert t.touched and [r[0] for r in _records_of(t.batch)] == [b"k7", b"k8", b"k9", b"k11"]
    assert (t.source_first, t.source_last) == (207, 211)
    fields = chain({"type": "dropJsonFields", "fields": ["secret"]}, {"type": "renameHeader", "from": "kind",
                                                                        "to": "k"})
    t = transform_batch(_batch(range(1, 3), codec), fields, "t", 0, 0)
    assert t.touched and _records_of(t.batch) == [(b"k1", {"seq": 1}, [("k", b"info")], 1001),
                                                  (b"k2", {"seq": 2}, [("k", b"info")], 1002)]


def test_dropped_and_not_json_are_counted_per_mirror_in_the_metrics() -> None:
    from sparkmirror.copying.shares import Share
    from sparkmirror.exposition import prometheus_text
    from sparkmirror.stats import MirrorStats

    a, b = Share(0, "t", 0, []), Share(10, "t", 0, [])
    a.note({"dropped": 2}), b.note({"dropped": 1, "not_json": 4})
    a.absorb(b)
    assert a.transformed == {"dropped": 3, "not_json": 4}
    stats = MirrorStats("m")
    stats.update([{"source_topic": "t", "partition": 0, "target_topic": "a.t", "records": 5, "bytes": 50,
                   "epoch_start_ms": 0, "epoch_end_ms": 1000, "lane": 0, "next_offset": 13, "source_end": 13,
                   "lag": 0, "latency_ms_sum": 0, "latency_ms_max": 0, "transformed": a.transformed}])
    snap = stats.snapshot()
    assert snap["transformed"] == {"dropped": 3, "not_json": 4}
    served = {"mirror": "m", "source": "a", "target": "b", "topics": 1, "partitions": 1, "lag": 0,
              "records_per_s": 0.0, "bytes_per_s": 0.0, "records_total": 5, "heartbeats": 0, "checkpoint_groups": 0,
              "updated": 0, "errors": {}, "partitions_detail": [], "transactions": 0,
              "transformed": snap["transformed"]}  # metrics.py hands the stats' figures on as they are
    text = prometheus_text("fg", {"m": served})
    labels = 'flow_group="fg",mirror="m",outcome="{}",source="a",target="b"'
    assert f"sparkmirror_mirror_records_transformed_total{{{labels.format('dropped')}}} 3.0" in text
    assert f"sparkmirror_mirror_records_transformed_total{{{labels.format('not_json')}}} 4.0" in text


def test_route_names_the_remote_topic_and_two_topics_on_one_name_are_a_conflict() -> None:
    from sparkmirror.replication import TopicFilter, policy_for
    from sparkmirror.topicplan import SourceTopic, plan_sync

    routes = [{"type": "route", "topics": r"a\.(orders|payments)-v\d+", "replacement": "dr-$1"},
              {"type": "route", "topics": r"dr-(?<kind>.*)", "replacement": "${kind}.dr"},
              {"type": "dropRecords", "key": "x"}]
    m = Mirror(name="a", source="a", target="b", transforms=routes)
    policy = policy_for(m)
    assert policy.format_remote_topic("a", "orders-v2") == "orders.dr"  # each route on the one before's name
    assert policy.format_remote_topic("a", "other") == "a.other"
    assert compiled(m) is not None and len(compiled(m).steps) == 1  # routes are no record step
    ident = policy_for(Mirror(name="a", source="a", target="b", replicationPolicy="identity",
                              transforms=[{"type": "route", "topics": "(.*)", "replacement": "mirror-$1"}]))
    assert ident.format_remote_topic("a", "t") == "mirror-t" and ident.uses_provenance
    assert compiled(Mirror(name="a", source="a", target="b", transforms=routes[:1])) is None
    sources = {t: SourceTopic(t, 1) for t in ("orders-v1", "orders-v2", "payments-v1")}
    sync = plan_sync(m, policy, TopicFilter(".*", "__.*"), sources, {})
    assert sorted((r.source_topic, r.target_topic) for r in sync.routes) == [("orders-v1", "orders.dr"),
                                                                             ("payments-v1", "payments.dr")]
    assert [t for t, _ in sync.conflicts] == ["orders-v2"]
    for bad, words in (({"topics": "a(", "replacement": "x"}, "invalid regex"),
                       ({"topics": "a", "replacement": "$1"}, "names group 1"),
                       ({"topics": "(a)", "replacement": "x$"}, "names no group")):
        errors = plan(_resource([{"type": "route", **bad}])).errors
        assert any("spec.mirrors[0].transforms[0]" in e.field and words in e.message for e in errors), errors


def test_batch_path_legacy_message_sets_keep_their_offsets() -> None:
    """A compressed magic-1 message set is one wrapper whose header names its last offset only: the range is the
    inner records', as rebuild.py gives it."""
    import struct

    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    from sparkmirror.copying.batches import split_batches
    from sparkmirror.copying.transformbatch import transform_batch

    b = LegacyRecordBatchBuilder(magic=1, compression_type=1, batch_size=1 << 20)
    for i in range(3):
        b.append(i, timestamp=1000 + i, key=b"k%d" % i, value=b"{}")
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, 42)  # as a broker stores it: the wrapper at the last inner offset (40..42)
    (wrapper,) = split_batches(bytes(raw))
    t = transform_batch(wrapper, chain({"type": "dropRecords", "key": "k1"}), "t", 0, 0)
    assert (t.touched, t.dropped, t.source_first, t.source_last) == (True, 1, 40, 42)
    assert t.batch.magic == 2 and [r[0] for r in _records_of(t.batch)] == [b"k0", b"k2"]
    assert [r[3] for r in _records_of(t.batch)] == [1000, 1002]


def test_heartbeats_pass_untouched_whatever_the_chain() -> None:
    """MM2 mirrors heartbeats topics whatever the filter; their records are MM2's binary format, read downstream by
    the heartbeat chain and MM2's tools. A Python transform decoding values as text once stopped the mirror on one
    (CI, once another test had created `heartbeats` on the shared source cluster)."""
    c = chain({"type": "python", "callable": "tests.support.transformfns:tag_and_drop_elevens"},
              {"type": "addHeader", "name": "x", "value": "1"})
    beat = b"\x00\x00\x00\x01\xff\xfe"  # not UTF-8
    for topic in ("heartbeats", "west.heartbeats", "east.west.heartbeats"):
        assert c.apply(topic, 0, 11, 1000, b"k", beat, None) == (b"k", beat, None), topic
    with pytest.raises(TransformFailed, match="raised on t"):
        c.apply("t", 0, 0, 1000, b"k", beat, None)  # a data topic still goes through the chain
    identity = compiled(Mirror(name="a", source="a", target="b", replicationPolicy="identity",
                               transforms=[{"type": "addHeader", "name": "x", "value": "1"}]))
    assert identity is not None and identity.apply("heartbeats", 0, 0, 1000, b"k", beat, None)[2] is None
    assert identity.apply("t", 0, 0, 1000, b"k", beat, None)[2] == [("x", b"1")]
