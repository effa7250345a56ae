"""`sparkmirror failback`: after a failover a -> b, consumers move back to a, and every record is read once across
both clusters. Real brokers; the mirrors copy with their real lanes (no Spark needed for one epoch each)."""
from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer

from sparkmirror.cli import main
from sparkmirror.progress.state import OffsetMap
from sparkmirror_dev.testing import (commit_group, consume_as_group, create_topic, produce_numbered, read_topic,
                                     unique_name)
from tests.support.failback import delete_topics, mirror_resource, read_some, run_failback, topics_of

from .conftest import mirror_once

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(1.6)]


def test_translate_back_is_the_reverse_of_translate() -> None:
    from sparkmirror.progress.state import Range

    def rng(sf, sl, tf, tl, count):
        return Range(sf, sl, tf, tl, count, 0, 0, "a.t", "t", 0, "m", "a")

    m = OffsetMap([rng(0, 9, 0, 9, 10), rng(10, 24, 10, 19, 10), rng(25, 29, 20, 24, 5)])
    for source in range(0, 10):
        assert m.translate_back(m.translate(source)) == source  # dense: exact both ways
    assert m.translate_back(10) == 10 and m.translate_back(15) == 10  # a gapped range: its start (repeat, no skip)
    assert m.translate_back(22) == 27 and m.translate_back(25) == 30  # past the last range: the offset after it
    assert OffsetMap([rng(5, 9, 3, 7, 5)]).translate_back(2) is None  # before the history held


@pytest.mark.parametrize("copy", ["records", "batches"])
def test_failback_moves_groups_home_and_every_record_is_read_once(kafka_a, kafka_b, topic, tmp_path, capfd,
                                                                  figure, copy) -> None:
    """`sparkmirror failover` a -> b, the group reads on b (the mirrored topic and b's own, which producers write
    to now and a reverse mirror copies to a), then `sparkmirror failback`: on a it reads the rest of both, and
    every record is read once over both clusters. Aborted records on a make offsets on a and b differ."""
    src = topic(kafka_a, 2)
    before = topics_of(kafka_a.bootstrap)
    try:
        _failback(kafka_a, kafka_b, src, tmp_path, capfd, figure, copy)
    finally:  # the clusters are shared: what the reverse mirror made on a (b.heartbeats, ...) goes again
        delete_topics(kafka_a.bootstrap, topics_of(kafka_a.bootstrap) - before)
        delete_topics(kafka_b.bootstrap, {src})


def _copied_forward(kafka_a, kafka_b, src: str, tmp_path, identity: bool, copy: str = "records"):
    """Sequences 0..99 on each partition of `src` on a, with an aborted stretch between 49 and 50 (offsets on a
    and b differ from there on), the resources of a -> b and b -> a in files, and a -> b copied once:
    (files, forward flow group, reverse flow group)."""
    from sparkmirror.runner.resources import load

    produce_numbered(kafka_a.bootstrap, src, 2, 0, 50)
    tx = Producer({"bootstrap.servers": kafka_a.bootstrap, "transactional.id": unique_name("fb-tx")})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(20):
        tx.produce(src, value=f"{i % 2}:aborted".encode(), partition=i % 2)
    tx.flush(30)  # sent, then aborted (unsent ones would just be dropped)
    tx.abort_transaction(30)
    produce_numbered(kafka_a.bootstrap, src, 2, 50, 50)
    files = {"fwd": tmp_path / "fwd.yaml", "rev": tmp_path / "rev.yaml"}
    files["fwd"].write_text(json.dumps(mirror_resource(unique_name("fwd"), ("b", kafka_b.bootstrap),
                                                 ("a", kafka_a.bootstrap), src, identity, copy)))
    files["rev"].write_text(json.dumps(mirror_resource(unique_name("rev"), ("a", kafka_a.bootstrap),
                                                 ("b", kafka_b.bootstrap), src, identity, copy)))
    fwd, rev = load([str(files["fwd"])]).configs[0], load([str(files["rev"])]).configs[0]
    mirror_once(fwd)
    return files, fwd, rev


def _assert_each_once(read: dict[int, list[int]], want: list[int]) -> None:
    tally = {p: (sorted(set(want) - set(v)), sorted(x for x in set(v) if v.count(x) > 1)) for p, v in read.items()}
    assert {p: sorted(v) for p, v in read.items()} == {p: sorted(want) for p in (0, 1)}, \
        f"(missing, read twice) per partition: {tally}"


def _failback(kafka_a, kafka_b, src: str, tmp_path, capfd, figure, copy: str) -> None:
    files, fwd, rev = _copied_forward(kafka_a, kafka_b, src, tmp_path, identity=False, copy=copy)
    group = unique_name("fb-app")
    commit_group(kafka_a.bootstrap, group, {(src, 0): 20, (src, 1): 90})  # 1: past the aborted stretch
    # what the group read on a before the failover: sequences 0..19, and 0..78 (offset 90 is sequence 79)
    read = {p: [int(r.value.decode().split(":")[1]) for r in recs if r.offset < (20, 90)[p]]
            for p, recs in read_topic(kafka_a.bootstrap, src).items()}
    assert {p: len(v) for p, v in read.items()} == {0: 20, 1: 79}

    log = str(tmp_path / "clients.log")
    assert main(["failover", "-f", str(files["fwd"]), "--mirror", "a", "--groups", group, "--log-file", log]) == 0
    for p, seqs in read_some(kafka_b.bootstrap, group, f"a.{src}", 2, 10).items():  # it reads on b a while
        read[p] += seqs
    # producers write on b now; the reverse mirror copies that back to a
    create_topic(kafka_b.bootstrap, src, 2)
    produce_numbered(kafka_b.bootstrap, src, 2, 1000, 40)
    mirror_once(rev)
    for p, seqs in read_some(kafka_b.bootstrap, group, src, 2, 15).items():
        read[p] += seqs

    doc, took = run_failback(files, group, log, capfd)
    assert doc["failback"]["undone"] == [{"flowGroup": fwd.name, "undone": True}]
    moved = {(r["sourceTopic"], r["targetTopic"], r["partition"]): r["action"]
             for g in doc["groups"] for r in g["partitions"]}
    assert moved == {(f"a.{src}", src, 0): "committed", (f"a.{src}", src, 1): "committed",
                     (src, f"b.{src}", 0): "committed", (src, f"b.{src}", 1): "committed"}, doc
    # back on a: the rest of a's topic and what was written on b meanwhile, each record once over both clusters
    for p, seqs in consume_as_group(kafka_a.bootstrap, group, src, 2).items():
        read[p] += seqs
    for p, seqs in consume_as_group(kafka_a.bootstrap, group, f"b.{src}", 2).items():
        read[p] += seqs
    _assert_each_once(read, [*range(100), *range(1000, 1040)])
    # the forward mirror copies again (its failover undone): a record produced on a now arrives on b
    produce_numbered(kafka_a.bootstrap, src, 2, 100, 1)
    mirror_once(fwd)
    assert {p: [int(r.value.decode().split(":")[1]) for r in recs][-1]
            for p, recs in read_topic(kafka_b.bootstrap, f"a.{src}").items()} == {0: 100, 1: 100}
    # usage: the reverse mirror must be in the files
    assert main(["failback", "-f", str(files["fwd"]), "--mirror", "a"]) == 2
    assert "no mirror from 'b' back to 'a' in the files" in capfd.readouterr().err
    figure(f"failback_{copy}", f"{took:.1f} s from the command to consumers able to move back; the group read "
           f"{sum(len(v) for v in read.values())} records over both clusters, each once")


def test_failback_under_the_identity_policy_uses_each_map_where_it_holds(kafka_a, kafka_b, topic, tmp_path, capfd,
                                                                        figure) -> None:
    """Under the identity policy one topic on b holds what a -> b copied and, after it, what producers wrote on b
    (copied back into the same topic on a). The group stops partition 0 inside the copied records and partition 1
    past them, among b's own: failback moves each through the map that holds it (the forward map back, the
    reverse map forward) and every record is read once over both clusters."""
    src = topic(kafka_a, 2)
    before = {c.name: topics_of(c.bootstrap) for c in (kafka_a, kafka_b)}
    try:
        _identity_failback(kafka_a, kafka_b, src, tmp_path, capfd, figure)
    finally:  # the clusters are shared: what the mirrors made (src on b, heartbeats, ...) goes again
        for c in (kafka_a, kafka_b):
            delete_topics(c.bootstrap, topics_of(c.bootstrap) - before[c.name])


def _identity_failback(kafka_a, kafka_b, src: str, tmp_path, capfd, figure) -> None:
    files, fwd, rev = _copied_forward(kafka_a, kafka_b, src, tmp_path, identity=True)
    group = unique_name("fb-id")
    commit_group(kafka_a.bootstrap, group, {(src, 0): 20, (src, 1): 90})
    read = {p: [int(r.value.decode().split(":")[1]) for r in recs if r.offset < (20, 90)[p]]
            for p, recs in read_topic(kafka_a.bootstrap, src).items()}

    log = str(tmp_path / "clients.log")
    assert main(["failover", "-f", str(files["fwd"]), "--mirror", "a", "--groups", group, "--log-file", log]) == 0
    for p, seqs in read_some(kafka_b.bootstrap, group, src, 2, 10).items():
        read[p] += seqs
    produce_numbered(kafka_b.bootstrap, src, 2, 1000, 40)  # producers write on b now, into the same topic
    mirror_once(rev)
    # partition 0 stays inside what a -> b copied (sequence 34); partition 1 reads past it into b's own (1003)
    for p, seqs in read_some(kafka_b.bootstrap, group, src, 2, {0: 5, 1: 15}).items():
        read[p] += seqs
    assert (read[0][-1], read[1][-1]) == (34, 1003), read

    doc, took = run_failback(files, group, log, capfd)
    moved = sorted((r["sourceTopic"], r["targetTopic"], r["partition"], r["action"])
                   for g in doc["groups"] for r in g["partitions"])
    assert moved == [(src, src, 0, "committed"), (src, src, 1, "committed")], doc
    for p, seqs in consume_as_group(kafka_a.bootstrap, group, src, 2).items():
        read[p] += seqs
    _assert_each_once(read, [*range(100), *range(1000, 1040)])
    # a -> b copies again, and not what came from b: b holds each sequence once, the new record last
    produce_numbered(kafka_a.bootstrap, src, 2, 100, 1)
    mirror_once(fwd)
    on_b = {p: [int(r.value.decode().split(":")[1]) for r in recs]
            for p, recs in read_topic(kafka_b.bootstrap, src).items()}
    assert {p: (sorted(v), v[-1]) for p, v in on_b.items()} == \
        {p: (sorted([*range(101), *range(1000, 1040)]), 100) for p in (0, 1)}, on_b
    figure("failback_identity", f"{took:.1f} s; partition 0 moved back through the forward map, partition 1 "
           f"through the reverse one; {sum(len(v) for v in read.values())} records read, each once")
