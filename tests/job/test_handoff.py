"""Worker-generation handoff without Kubernetes, on real Kafka and Spark: `Driver.handoff` (what `sparkmirror run`
does when its resource file changes) while records flow at a steady rate, through version changes, lane-count
changes and a flow-group split and merge. Every record is counted on the target: none missing, none twice."""
from __future__ import annotations

import time

import pytest

from sparkmirror.handoff.takeover import HandoffError, check_not_superseded, take_over
from sparkmirror.progress import read_progress
from sparkmirror.resource.flowgroup import CopyPath, FlowGroupConfig, Worker
from sparkmirror.runner.local import LocalRun
from sparkmirror_dev.testing import NumberedProducer, check_numbered, count_records

from .committed import committed_end
from .conftest import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(2.0)]


def commit_gaps(bootstrap: str, cfg: FlowGroupConfig, since_ms: int) -> list[tuple[int, int]]:
    """(gap ms, at ms) between consecutive commits of each source partition after `since_ms`, largest first:
    while records flow steadily a lane commits every ~commitIntervalMs, so a gap is a pause in copying."""
    state = read_progress({"bootstrap.servers": bootstrap}, cfg.progressTopic, resource=cfg.resource)
    gaps = []
    for m in state.maps.values():
        times = sorted(r.commit_ms for r in m.records if r.commit_ms >= since_ms and r.count)
        gaps += [(b - a, b) for a, b in zip(times, times[1:])]
    return sorted(gaps, reverse=True)


def _with(cfg: FlowGroupConfig, **worker) -> FlowGroupConfig:
    return cfg.model_copy(update={"worker": cfg.worker.model_copy(update=worker)})


def test_handoffs_while_copying_lose_and_repeat_nothing(kafka_a, kafka_b, topic, flowgroup, tmp_path, figure):
    t1, t2 = topic(kafka_a, partitions=3), topic(kafka_a, partitions=3)
    base = flowgroup(f"{t1}|{t2}", name="hand", lanes=2, epochSeconds=5, copy="records")
    # after the version changes the mirror switches to `copy: batches` in a handoff, and the rest runs there
    batches = base.model_copy(update={"copy_path": CopyPath.BATCHES})
    split = [batches.model_copy(update={"name": "hand-1",
                                        "mirrors": [base.mirrors[0].model_copy(update={"topics": t1})]}),
             batches.model_copy(update={"name": "hand-2",
                                        "mirrors": [base.mirrors[0].model_copy(update={"topics": t2})]})]
    steps: list[tuple[str, list[FlowGroupConfig]]] = (
        [(f"version v{v}", [_with(base, version=f"v{v}")]) for v in range(2, 7)]
        + [("copy: records -> batches", [_with(batches, version="v6")]),
           ("lanes 2 -> 3", [_with(batches, version="v6").model_copy(update={"lanes": 3})]),
           ("lanes 3 -> 1", [_with(batches, version="v6").model_copy(update={"lanes": 1})]),
           ("split into two flow groups", [_with(c, version="v6") for c in split]),
           ("merge back into one", [_with(batches, version="v6")])])
    producers = [NumberedProducer(kafka_a.bootstrap, t, rate=100) for t in (t1, t2)]
    run = LocalRun([base], checkpoint_root=str(tmp_path / "ckpt"))
    t_start = int(time.time() * 1000)
    for p in producers:
        p.start()
    handoffs = []
    try:
        run.start()
        wait_for(lambda: count_records(kafka_b.bootstrap, f"a.{t1}", 20) > 300, 120, "copying to start")
        for what, configs in steps:
            done = run.handoff(configs)
            assert done, f"{what}: no handoff planned"
            handoffs += [(what, d) for d in done]
            assert not run.failures(), run.failures()
            # the new generation (the old lanes are fenced by now) copies both topics before the next handoff:
            # waited for, where a fixed 4 s each let it copy without looking
            ends = {t: committed_end(kafka_b.bootstrap, f"a.{t}") for t in (t1, t2)}
            wait_for(lambda: all(committed_end(kafka_b.bootstrap, f"a.{t}") > n for t, n in ends.items()), 60,
                     f"{what}: the new generation copying")
            assert not run.failures(), run.failures()
        sent = [p.stop() for p in producers]
        for t, n in zip((t1, t2), sent):
            wait_for(lambda: count_records(kafka_b.bootstrap, f"a.{t}", 20) >= 3 * n, 180, f"a.{t} to catch up")
        time.sleep(3)  # a duplicate would land after the count was reached
        assert not run.failures(), run.failures()
    finally:
        for p in producers:
            p.stop()
        run.stop()
    for t, n in zip((t1, t2), sent):
        check_numbered(kafka_b.bootstrap, f"a.{t}", 3, n)
    assert [c.worker.generation for c in run.initial] == [1]
    assert handoffs[-1][1]["generation"] == 1 + len(steps)
    gaps = commit_gaps(kafka_b.bootstrap, base, t_start)
    figure("handoffs", f"{len(handoffs)} handoffs, {sum(sent) * 3} records, 0 missing, 0 duplicated; "
           f"largest pauses between commits: {[g for g, _ in gaps[:5]]} ms; taken over in "
           f"{[d['tookOverMs'] for _, d in handoffs]} ms")


def test_a_superseded_generation_refuses_to_copy(kafka_a, kafka_b, topic, flowgroup):
    """A generation mark on the progress topic outranks the config: generation 1 cannot copy after 3 took over,
    and a driver without a Lease continues as the generation after the last one marked."""
    t = topic(kafka_a, partitions=1)
    cfg = flowgroup(t, name="marked")
    take_over(cfg.model_copy(update={"worker": Worker(generation=3)}))
    with pytest.raises(HandoffError, match="taken over by worker generation 3; this is generation 1"):
        check_not_superseded(cfg)
    state = read_progress({"bootstrap.servers": kafka_b.bootstrap}, cfg.progressTopic, resource=cfg.resource)
    assert state.generation(cfg.resource, cfg.resourceUid, "marked") == 3
    assert state.latest == {}  # a mark is not progress
    from sparkmirror.driver import _after_marked

    after = _after_marked(cfg)
    assert after.worker.generation == 4 and after.worker.predecessors[0].generation == 3
    assert after.worker.predecessors[0].transactionalIds == {"b": [f"sparkmirror.local.mirror.marked.a-to-b.lane-{i}"
                                                                    for i in range(2)]}


def test_a_take_back_revokes_the_later_generation_and_fences_its_open_transactions(kafka_a, kafka_b, topic,
                                                                                   flowgroup):
    """Generation 2 (3 lanes) took over from 1 (2 lanes) and holds a transaction open when 1 takes the flow group
    back (handoff/takeback.py): the transaction is aborted (read_committed sees nothing of it), 2's producer is
    fenced, 2 is refused from then on, also after a late mark of its own, and 1 may copy."""
    from confluent_kafka import KafkaException, Producer

    from sparkmirror.handoff.takeback import Revoked, take_back, taken_back_before
    from sparkmirror.handoff.takeover import marks_by_target, write_mark
    from sparkmirror.resource.names import transactional_ids

    t = topic(kafka_a, partitions=1)
    one = flowgroup(t, name="back")
    two = next_generation_of(one, 2, lanes=3)
    take_over(one)
    take_over(two)
    with pytest.raises(HandoffError, match="taken over by worker generation 2; this is generation 1"):
        check_not_superseded(one)
    out = topic(kafka_b, partitions=1)
    tid = transactional_ids(two.resource, two.name, two.lane_routes())["b"][2]  # a lane generation 1 never had
    lane = Producer({"bootstrap.servers": kafka_b.bootstrap, "transactional.id": tid})
    lane.init_transactions(30)
    lane.begin_transaction()
    lane.produce(out, b"in flight")
    lane.flush(10)
    revoked = Revoked(2, ("back",), transactional_ids(two.resource, two.name, two.lane_routes()))
    assert taken_back_before(one, marks_by_target(one)) == 0
    took = take_back(one, 2, [revoked])
    assert tid in took.fenced and len(took.fenced) == 3  # generation 2's three lanes (1's two among them)
    with pytest.raises(KafkaException):
        lane.commit_transaction(10)
    assert count_records(kafka_b.bootstrap, out, 10) == 0
    check_not_superseded(one)
    with pytest.raises(HandoffError, match="generation 2 of flow group .back. of .* was rolled back"):
        check_not_superseded(two)
    write_mark(two, "b", ["back"], int(time.time() * 1000), 30, go=True)  # generation 2's driver, late
    state = marks_by_target(one)["b"]
    of = (one.resource, one.resourceUid, one.name)
    assert state.may_copy(*of, 1) is True and state.may_copy(*of, 2) is False and state.ceiling(*of) == 2
    assert taken_back_before(one, {"b": state}) == 2  # a restart of generation 1 need not take it back again
    assert taken_back_before(two, {"b": state}) == 0
    check_not_superseded(next_generation_of(one, 3))  # the next handoff is not held back by it
    from sparkmirror.driver import _after_marked

    assert _after_marked(one).worker.generation == 3  # without a Lease: never as the generation rolled back


def next_generation_of(cfg: FlowGroupConfig, generation: int, **update) -> FlowGroupConfig:
    return _with(cfg, generation=generation).model_copy(update=update)
