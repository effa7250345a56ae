"""Failover and failback through a mirror whose transforms drop records (issue 38): the offset map keeps what
was dropped, so a group moves to the target onto the next kept record and back to the source right after the
last record it read there. Real brokers; the mirrors copy with their real lanes on the default copy path."""
from __future__ import annotations

import json

import pytest

from sparkmirror.cli import main
from sparkmirror_dev.testing import commit_group, consume_as_group, create_topic, produce_numbered, unique_name

from tests.support.failback import delete_topics, mirror_resource, read_some, run_failback, topics_of

from .conftest import mirror_once

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(0.8)]

DROP = {"type": "dropRecords", "key": r"\d*[05]"}  # produce_numbered keys records by sequence: every fifth dropped


def kept(seq: int) -> bool:
    return seq % 5 != 0


def test_failover_and_failback_through_dropped_records(kafka_a, kafka_b, topic, tmp_path, capfd) -> None:
    """Sequences 0..99 on a, copied to b without the multiples of 5. The group stops on a at sequence 30 (dropped)
    on partition 0 and 47 on partition 1; `failover` puts it on 31 and 47 on b; it reads there up to 44 on partition
    0 (45 dropped, 46 next on b); `failback` puts it on 45 on a, the record after the last
    one read. Read over both clusters: every record once but those dropped while it read on b (never shown)."""
    src = topic(kafka_a, 2)
    before = {c.name: topics_of(c.bootstrap) for c in (kafka_a, kafka_b)}
    try:
        _through_dropped_records(kafka_a, kafka_b, src, tmp_path, capfd)
    finally:  # the clusters are shared: what the mirrors made goes again
        for c in (kafka_a, kafka_b):
            delete_topics(c.bootstrap, topics_of(c.bootstrap) - before[c.name])


def _through_dropped_records(kafka_a, kafka_b, src: str, tmp_path, capfd) -> None:
    from sparkmirror.runner.resources import load

    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    forward = mirror_resource(unique_name("fwd"), ("b", kafka_b.bootstrap), ("a", kafka_a.bootstrap), src, copy="batches")
    forward["spec"]["mirrors"][0]["transforms"] = [DROP]
    files = {"fwd": tmp_path / "fwd.yaml", "rev": tmp_path / "rev.yaml"}
    files["fwd"].write_text(json.dumps(forward))
    files["rev"].write_text(json.dumps(mirror_resource(unique_name("rev"), ("a", kafka_a.bootstrap),
                                                 ("b", kafka_b.bootstrap), src, copy="batches")))
    fwd, rev = load([str(files["fwd"])]).configs[0], load([str(files["rev"])]).configs[0]
    mirror_once(fwd)

    group = unique_name("fb-xf")
    at = {0: 30, 1: 47}  # offsets on a are the sequences (nothing else was written)
    commit_group(kafka_a.bootstrap, group, {(src, p): o for p, o in at.items()})
    read = {p: list(range(o)) for p, o in at.items()}
    log = str(tmp_path / "clients.log")
    capfd.readouterr()
    assert main(["failover", "-f", str(files["fwd"]), "--mirror", "a", "--groups", group, "-o", "json",
                 "--log-file", log]) == 0
    doc = json.loads(capfd.readouterr().out)
    on_b = [s for s in range(100) if kept(s)]  # target offset = index among the kept
    moved = {r["partition"]: (r["sourceOffset"], r["targetOffset"], r["action"])
             for g in doc["groups"] for r in g["partitions"]}
    assert moved == {0: (30, on_b.index(31), "committed"), 1: (47, on_b.index(47), "committed")}, doc

    n = {0: 12, 1: 9}
    for p, seqs in read_some(kafka_b.bootstrap, group, f"a.{src}", 2, n).items():
        assert seqs == [s for s in on_b if s >= at[p]][:n[p]], (p, seqs)  # the next kept ones, none twice
        read[p] += seqs
    last = {p: v[-1] for p, v in read.items()}  # the last sequence the group read on b's remote topic
    assert last[0] == 44 and not kept(45), read  # partition 0 stops just before a dropped record
    create_topic(kafka_b.bootstrap, src, 2)  # producers write on b now; the reverse mirror copies that back
    produce_numbered(kafka_b.bootstrap, src, 2, 1000, 20)
    mirror_once(rev)
    for p, seqs in read_some(kafka_b.bootstrap, group, src, 2, 20).items():
        read[p] += seqs

    doc, _ = run_failback(files, group, log, capfd)
    back = {(r["sourceTopic"], r["partition"]): (r["sourceOffset"], r["targetOffset"], r["action"])
            for g in doc["groups"] for r in g["partitions"] if r["targetTopic"] == src}
    assert back == {(f"a.{src}", p): (on_b.index(last[p]) + 1, last[p] + 1, "committed") for p in (0, 1)}, doc
    for p, seqs in consume_as_group(kafka_a.bootstrap, group, src, 2).items():
        assert seqs == list(range(last[p] + 1, 100)), (p, seqs)  # from right after the last read: 45 on p0
        read[p] += seqs
    shown = {p: [s for s in range(100) if kept(s) or not at[p] <= s <= last[p]] for p in (0, 1)}
    for p in (0, 1):
        assert sorted(read[p]) == sorted([*shown[p], *range(1000, 1020)]), p  # each once; dropped ones unseen on b
