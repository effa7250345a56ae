"""Two copies of the same lane at once (a zombie and its replacement) never produce a duplicate."""
from __future__ import annotations

import threading
import time

from sparkmirror.copier import LaneCopier
from sparkmirror.lanes import plan_lanes
from sparkmirror.progress import ensure_progress_topic, read_progress

from .conftest import read_topic, wait_for
from .test_eos_crash import PARTS, NumberedProducer


def test_second_copy_of_a_lane_fences_the_first(kafka_a, kafka_b, topic, flowgroup):
    src = topic(kafka_a, PARTS)
    dst = topic(kafka_b, PARTS, name=f"a.{src}")
    cfg = flowgroup(src, lanes=1, commitIntervalMs=50)
    mirror = cfg.mirrors[0]
    ensure_progress_topic(cfg.cluster("b").client_config(), cfg.progressTopic)
    parts = list(plan_lanes(mirror.name, 1, [(src, dst, PARTS)])[0].partitions)
    producer = NumberedProducer(kafka_a.bootstrap, src, rate=400)
    producer.start()
    results: dict[str, list] = {}

    def copy(name: str, seconds: float) -> None:
        results[name] = LaneCopier(cfg, mirror, 0, parts, seconds).run()

    zombie = threading.Thread(target=copy, args=("zombie", 120.0))
    zombie.start()
    target = cfg.cluster("b").client_config()
    wait_for(lambda: bool(read_progress(target, cfg.progressTopic, "a").latest), 60, "the first copy committing")
    time.sleep(1)
    newer = threading.Thread(target=copy, args=("newer", 6.0))
    newer.start()
    newer.join(60)
    zombie.join(150)
    sent = producer.stop()
    copy("final", 4.0)  # catch up what was produced after both stopped

    assert all(s.fenced for s in results["zombie"]), ("the older copy kept running after being fenced", results)
    assert results["zombie"][0].epoch_end_ms < results["zombie"][0].epoch_start_ms + 110_000
    assert not any(s.fenced for s in results["newer"]) and sum(s.records for s in results["newer"]) > 0
    assert sum(s.records for s in results["zombie"]) > 0, "the zombie copied nothing: nothing was tested"
    got = read_topic(kafka_b.bootstrap, dst)
    for part in range(PARTS):
        seqs = [int(r.value.decode().split(":")[1]) for r in got[part]]
        assert seqs == list(range(sent)), f"partition {part}: {len(seqs) - len(set(seqs))} duplicates"
    latest = read_progress(cfg.cluster("b").client_config(), cfg.progressTopic, "a").latest
    assert {k[2]: r.next_offset for k, r in latest.items()} == {p: got[p][-1].offset + 1 - 0 for p in range(PARTS)} \
        or all(r.next_offset >= sent for r in latest.values())
