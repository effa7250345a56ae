"""Broker outages longer than every client timeout: the mirror waits, says so, and resumes exactly where its last
commit ended. A producer writes numbered records throughout; afterwards a read_committed consumer on the target
must find every sequence number exactly once per partition (0 missing, 0 duplicated).

Each outage is a SIGKILL of a single-broker cluster (a whole cluster away), 70 s long: more than the lanes'
delivery timeout (transactionTimeoutMs 15 s here), the topic sync's 15 s, the 30 s offset reads and the 60 s
init_transactions. Each test has clusters of its own, so stopping one disturbs no other test.
"""
from __future__ import annotations

import logging
import threading
import time

import pytest

from sparkmirror_dev.kafka import KafkaCluster
from sparkmirror_dev.testing import create_topic, read_topic, unique_name
from sparkmirror.copying import lane_copy, run_epoch
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic
from sparkmirror.resource.flowgroup import FlowGroupConfig

from tests.support.campaign import RECORDS_IN_CAMPAIGN

from .conftest import wait_for
from .test_eos_crash import PARTS, NumberedProducer, _target_count

pytestmark = pytest.mark.minutes(5.8)

OUTAGE_S = 70.0


def _config(source: KafkaCluster, target: KafkaCluster, topic: str, **kw) -> FlowGroupConfig:
    return FlowGroupConfig.model_validate({
        "name": unique_name("fg"), "clusters": [{"alias": "src", "bootstrapServers": source.bootstrap},
                                                {"alias": "tgt", "bootstrapServers": target.bootstrap}],
        "mirrors": [{"name": "src-to-tgt", "source": "src", "target": "tgt", "topics": topic,
                     "emitCheckpoints": False}],
        "lanes": 1, "commitIntervalMs": 100, "transactionTimeoutMs": 15000, "progressTopic": unique_name("progress"),
        **kw})


def _outage(cluster: KafkaCluster, seconds: float) -> float:
    """SIGKILL the cluster's broker, keep it away for `seconds`, start it again (same ports, same data).
    Returns the monotonic time it answered again."""
    assert cluster.pid is not None
    cluster.kill()
    time.sleep(seconds)
    cluster.start()
    return time.monotonic()


def _tally(bootstrap: str, topic: str, sent: int) -> tuple[int, int, int]:
    """(records, missing, duplicated) of sequences 0..sent-1 in every partition, read_committed; asserts order."""
    got = read_topic(bootstrap, topic)
    records = missing = duplicated = 0
    for part in range(PARTS):
        seqs = [int(r.value.decode().split(":")[1]) for r in got.get(part, [])]
        assert all(r.value.decode().startswith(f"{part}:") for r in got.get(part, [])), f"partition {part} mixed up"
        records += len(seqs)
        missing += len(set(range(sent)) - set(seqs))
        duplicated += len(seqs) - len(set(seqs))
        assert list(dict.fromkeys(seqs)) == sorted(set(seqs)), f"partition {part} out of order"
    return records, missing, duplicated


def _resumed_after(bootstrap: str, topic: str, back: float, timeout: float = 120.0) -> float:
    """Seconds from the broker answering again until new records reach the target."""
    before = _target_count(bootstrap, topic)
    wait_for(lambda: _target_count(bootstrap, topic) > before, timeout, "copying again after the outage", 1.0)
    return time.monotonic() - back


@pytest.mark.parametrize("copy", [RECORDS_IN_CAMPAIGN, "batches"])
def test_lane_rides_out_a_source_outage(kafka, topic, caplog, figure, copy):
    """A lane copying from a source cluster that goes away for 70 s: it waits, then carries on in the same run."""
    source, target = kafka.cluster("outage-src"), kafka.cluster("b")
    src = topic(source, PARTS)
    cfg = _config(source, target, src).model_copy(update={"copy_path": copy})
    mirror = cfg.mirrors[0]
    remote = create_topic(target.bootstrap, f"src.{src}", PARTS)
    ensure_progress_topic(cfg.cluster("tgt").client_config(), cfg.progressTopic)
    producer = NumberedProducer(source.bootstrap, src)  # buffers across the outage (idempotent, 300 s timeout)
    producer.start()
    done = threading.Event()
    copier = lane_copy(cfg, mirror, 0, list(plan_lanes(mirror.name, 1, [(src, remote, PARTS)])[0].partitions),
                       epoch_seconds=600, should_stop=done.is_set)
    result: list = []
    lane = threading.Thread(target=lambda: result.extend(run_epoch(copier)), daemon=True)
    with caplog.at_level(logging.INFO, logger="sparkmirror"):
        lane.start()
        wait_for(lambda: _target_count(target.bootstrap, remote) > 0, 180, "the lane copying")  # a fresh cluster, a busy machine
        back = _outage(source, OUTAGE_S)
        resumed = _resumed_after(target.bootstrap, remote, back)
        time.sleep(3)
        sent = producer.stop()
        wait_for(lambda: _target_count(target.bootstrap, remote) >= sent * PARTS, 120, "catch-up")
        done.set()
        lane.join(120)
    assert not lane.is_alive() and result, "the lane did not end its run"
    records, missing, duplicated = _tally(target.bootstrap, remote, sent)
    lines = [r.getMessage() for r in caplog.records if "source cluster 'src'" in r.getMessage()]
    figure(f"source_outage_{copy}", f"source outage {OUTAGE_S:.0f} s: {records} records for {sent * PARTS}, missing "
           f"{missing}, duplicated {duplicated}, copying again {resumed:.1f} s after the broker answered; {lines}")
    assert (missing, duplicated) == (0, 0)
    assert any("unreachable since" in line for line in lines), lines
    assert any("reachable again after" in line for line in lines), lines
    assert len(lines) == 2, f"one line per state change, not per retry: {lines}"
    assert all(s.waiting is None for s in result)


def test_job_rides_out_a_target_outage(kafka, topic, job, figure):
    """The whole job (driver, topic sync, services, lanes) with its target cluster away for 70 s."""
    source, target = kafka.cluster("a"), kafka.cluster("outage-tgt")
    src = topic(source, PARTS)
    remote = f"src.{src}"
    cfg = _config(source, target, src, lanes=2, epochSeconds=10)
    producer = NumberedProducer(source.bootstrap, src)
    producer.start()
    jp = job(cfg)
    wait_for(lambda: _target_count(target.bootstrap, remote) > 0 or jp.proc.poll() is not None, 300, "copying")
    assert jp.proc.poll() is None, jp.log()[-3000:]
    back = _outage(target, OUTAGE_S)
    assert jp.proc.poll() is None, jp.log()[-3000:]
    resumed = _resumed_after(target.bootstrap, remote, back, 180)
    time.sleep(3)
    sent = producer.stop()
    wait_for(lambda: _target_count(target.bootstrap, remote) >= sent * PARTS or jp.proc.poll() is not None, 180,
             "catch-up")
    assert jp.proc.poll() is None, jp.log()[-3000:]
    time.sleep(2)  # a duplicate would show up as extra records after the count was reached
    records, missing, duplicated = _tally(target.bootstrap, remote, sent)
    log = jp.log()
    said = [ln.split(": ", 1)[-1] for ln in log.splitlines() if "unreachable since" in ln or "reachable again" in ln]
    figure("target_outage", f"target outage {OUTAGE_S:.0f} s: {records} records for {sent * PARTS}, missing "
           f"{missing}, duplicated {duplicated}, copying again {resumed:.1f} s after the broker answered; said: {said}")
    assert (missing, duplicated) == (0, 0)
    assert "mirror 'src-to-tgt': target cluster 'tgt' unreachable since" in log, log[-3000:]
    assert "mirror 'src-to-tgt': target cluster 'tgt' reachable again after" in log, log[-3000:]
    assert jp.stop() == 0, log[-3000:]


def test_a_lane_in_standby_waits_out_a_target_outage(kafka, topic, caplog):
    """A lane of a new worker generation waits in standby on the target's progress topic, polling every 200 ms.
    Its target goes away for longer than a metadata request may take: the lane says so once, waits, and starts
    when its generation's go mark is written after the target came back (before, the epoch failed, and with it
    the Spark query and the driver: a loaded broker answering slowly was enough)."""
    from sparkmirror.copying.standby import wait_for_go
    from sparkmirror.handoff.takeover import write_mark
    from sparkmirror.progress.reader import METADATA_TIMEOUT

    source, target = kafka.cluster("a"), kafka.cluster("standby-tgt")
    src = topic(source, 1)
    cfg = _config(source, target, src)
    cfg = cfg.model_copy(update={"worker": cfg.worker.model_copy(update={"generation": 2})})
    ensure_progress_topic(cfg.cluster("tgt").client_config(), cfg.progressTopic)
    result: list = []
    lane = threading.Thread(target=lambda: result.append(wait_for_go(cfg, cfg.mirrors[0], "lane-x", lambda: False)),
                            daemon=True)
    with caplog.at_level(logging.INFO, logger="sparkmirror"):
        lane.start()
        time.sleep(2)
        _outage(target, METADATA_TIMEOUT + 5)
        assert lane.is_alive() and not result, "the lane left standby while its target was away"
        write_mark(cfg, "tgt", [cfg.name], int(time.time() * 1000), 60, go=True)
        lane.join(60)
    assert result == [True], "the lane did not start on its go mark"
    lines = [r.getMessage() for r in caplog.records if "in standby, the target" in r.getMessage()]
    assert len(lines) == 2 and "did not answer" in lines[0] and "answers again" in lines[1], lines
