"""Deletion propagation on real brokers (issue 38's proof), with a grace of a few seconds: a source topic deleted,
recreated, deleted again; its remote topic follows only once the grace has passed since the source was first
seen gone (the clock read back from the progress topic by a topic sync made anew, as after a driver restart),
and a recreated source starts a new remote history: the old remote topic kept (and not written) through the
grace, then deleted and created afresh, holding exactly the new topic's records, counted by sequence number. A
target-owned remote topic of the same shape (the mirror's name pattern, created directly on the target before
the mirror, its source topic deleted too) is never touched; `sparkmirror plan` shows what would go and when."""
from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient

from sparkmirror.exposition import families
from sparkmirror.metrics import _Mirror, deletion_figures
from sparkmirror.mirrormonitor import MirrorMonitor
from sparkmirror.preview import observe, preview
from sparkmirror.routewatch import RouteWatch
from sparkmirror.runner.dryrun import lines
from sparkmirror.topicsync import TopicSync, topic_ids
from sparkmirror_dev.testing import check_numbered, create_topic, produce_numbered, unique_name

from .conftest import close_kept_lanes, mirror_once, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(1.5)]
GRACE = 6
PARTS = 2


def delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name])[name].result(30)
    wait_for(lambda: name not in admin.list_topics(timeout=30).topics, 30, f"{name} deleted")


def exists(bootstrap: str, name: str) -> bool:
    return name in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics


def sync_fresh(cfg) -> None:
    """A sync by a topic sync made anew: what it knows comes from the clusters and the progress topic alone."""
    sync = TopicSync(cfg, cfg.mirrors[0])
    try:
        sync.sync()
    finally:
        sync.close()


def figures(monitor: MirrorMonitor) -> dict[str, float]:
    """The deletion gauges a driver's /metrics would serve, from the monitor's progress tail."""
    with monitor.tail.lock:
        monitor.tail.poll(10)
    snap = {"a-to-b": {"source": "a", "target": "b", "partitions_detail": [], "records_total": 0, "lag": None, "topics": 0, "partitions": 0,
                       "transactions": 0, "heartbeats": 0, "checkpoint_groups": 0, "errors": {},
                       **deletion_figures(_Mirror(monitor.mirror, monitor))}}
    return {s.name: s.value for f in families("fg", snap) for s in f.samples
            if s.name.startswith("sparkmirror_mirror_remote_topics")}


def test_remote_topic_follows_its_source_after_the_grace_only(kafka_a, kafka_b, flowgroup) -> None:
    a, b = kafka_a.bootstrap, kafka_b.bootstrap
    src, theirs = unique_name("gone"), unique_name("gone")
    remote, their_remote = f"a.{src}", f"a.{theirs}"
    cfg = flowgroup(f"{src}|{theirs}", mirror={"deleteRemoteTopics": {"enabled": True, "graceSeconds": GRACE}})
    create_topic(a, src, PARTS)
    create_topic(a, theirs, PARTS)
    create_topic(b, their_remote, PARTS)  # the target's own topic, there before the mirror: never the mirror's
    produce_numbered(b, their_remote, PARTS, 0, 10)
    their_id = topic_ids(AdminClient({"bootstrap.servers": b}), {their_remote})[their_remote]
    produce_numbered(a, src, PARTS, 0, 50)
    try:
        mirror_once(cfg)
        check_numbered(b, remote, PARTS, 50)
        timeline: list[tuple[str, float]] = []

        # 1. deleted: seen gone, kept through the grace (by syncs of fresh topic syncs), then deleted
        delete_topic(a, src)
        delete_topic(a, theirs)
        gone_at = time.monotonic()
        sync_fresh(cfg)
        text = "\n".join(lines(preview(observe([cfg])).as_dict()))
        assert f"delete {remote} in " in text and their_remote not in text, text
        monitor = MirrorMonitor(cfg, cfg.mirrors[0])
        assert figures(monitor) == {"sparkmirror_mirror_remote_topics_deleted": 0,
                                    "sparkmirror_mirror_remote_topics_pending_deletion": 1}
        while time.monotonic() - gone_at < GRACE - 1.5:
            sync_fresh(cfg)
            assert exists(b, remote), f"{remote} deleted {time.monotonic() - gone_at:.1f} s after its source"
            time.sleep(1)
        check_numbered(b, remote, PARTS, 50)  # untouched meanwhile
        wait_for(lambda: (sync_fresh(cfg), not exists(b, remote))[1], 30, f"{remote} deleted after the grace")
        timeline.append(("deleted", time.monotonic() - gone_at))
        assert timeline[-1][1] >= GRACE, timeline

        # 2. created again: a new remote history from its first record
        create_topic(a, src, PARTS)
        produce_numbered(a, src, PARTS, 0, 30)
        mirror_once(cfg)
        check_numbered(b, remote, PARTS, 30)

        # 3. deleted and created again at once (a new topic id): the old remote topic is kept and not written
        # through the grace, then deleted and created afresh for the new topic, which is copied whole
        delete_topic(a, src)
        create_topic(a, src, PARTS)
        produce_numbered(a, src, PARTS, 0, 20)
        recreated_at = time.monotonic()
        mirror_once(cfg)  # its sync (the only one since) was within the grace: the route held, nothing copied
        check_numbered(b, remote, PARTS, 30)  # the old history, nothing of the new topic mixed in
        # a running lane's watch leaves the held topic to the driver's plan (it would take a new topic in place)
        for config, taken in ((cfg, False), (flowgroup(f"{src}|{theirs}"), True)):
            watch = RouteWatch(config, config.mirrors[0], (), lane=0)
            watch.growing = True
            gained, _ = watch._look({}, {})
            assert (src in (gained or {})) is taken, (config.mirrors[0].deleteRemoteTopics, gained)
        text = "\n".join(lines(preview(observe([cfg])).as_dict()))
        assert "created again" in text and f"not copied until its old remote topic is deleted: {src}" in text, text
        wait_for(lambda: (sync_fresh(cfg), not exists(b, remote))[1], 30, f"{remote} deleted after the grace")
        timeline.append(("recreated: old remote deleted", time.monotonic() - recreated_at))
        assert timeline[-1][1] >= GRACE, timeline
        wait_for(lambda: (mirror_once(cfg), exists(b, remote))[1], 30, f"{remote} created afresh")
        mirror_once(cfg)
        check_numbered(b, remote, PARTS, 20)

        # 4. deleted again: gone after the grace, and not made again
        delete_topic(a, src)
        gone_at = time.monotonic()
        wait_for(lambda: (sync_fresh(cfg), not exists(b, remote))[1], 30, f"{remote} deleted after the grace")
        timeline.append(("deleted again", time.monotonic() - gone_at))
        assert timeline[-1][1] >= GRACE, timeline
        sync_fresh(cfg)
        assert not exists(b, remote)

        # the target's own topic of the same shape: same id, same records, though its source is long gone
        assert topic_ids(AdminClient({"bootstrap.servers": b}), {their_remote}) == {their_remote: their_id}
        check_numbered(b, their_remote, PARTS, 10)
        assert figures(monitor) == {"sparkmirror_mirror_remote_topics_deleted": 1,
                                    "sparkmirror_mirror_remote_topics_pending_deletion": 0}
        monitor.close()
        print("deletion timeline (s after the source was deleted):", timeline)
    finally:
        close_kept_lanes()


def test_running_job_follows_a_deleted_topic_and_its_new_history(kafka_a, kafka_b, flowgroup, job) -> None:
    """The same rule in the whole job (driver, live routes, lanes keeping their clients, route watch): a source
    topic deleted while the job runs; its remote topic keeps exactly its records through the grace, then goes;
    the topic created again is copied whole into a fresh remote topic, and the job never stops."""
    a, b = kafka_a.bootstrap, kafka_b.bootstrap
    src = unique_name("gone")
    remote = f"a.{src}"
    create_topic(a, src, PARTS)
    produce_numbered(a, src, PARTS, 0, 100)
    cfg = flowgroup(src, epochSeconds=3, mirror={"refreshTopicsIntervalSeconds": 1,
                                                "deleteRemoteTopics": {"enabled": True, "graceSeconds": 10}})
    jp = job(cfg)
    try:
        def copied(n: int) -> bool:
            try:
                check_numbered(b, remote, PARTS, n)
                return True
            except Exception:  # noqa: BLE001 - not there yet
                return jp.proc.poll() is not None

        wait_for(lambda: copied(100), 240, "the first history mirrored")
        delete_topic(a, src)
        gone_at = time.monotonic()
        while time.monotonic() - gone_at < 8:  # within the grace: kept as it was
            assert jp.proc.poll() is None, jp.log()[-3000:]
            assert exists(b, remote)
            time.sleep(2)
        check_numbered(b, remote, PARTS, 100)
        wait_for(lambda: not exists(b, remote) or jp.proc.poll() is not None, 120, "the remote topic deleted")
        assert jp.proc.poll() is None, jp.log()[-3000:]
        assert time.monotonic() - gone_at >= 10
        create_topic(a, src, PARTS)
        produce_numbered(a, src, PARTS, 0, 40)
        wait_for(lambda: copied(40), 120, "the new history mirrored")
        assert jp.proc.poll() is None, jp.log()[-3000:]
        check_numbered(b, remote, PARTS, 40)
        assert f"deleted remote topic {remote}" in jp.log()
    finally:
        assert jp.stop() == 0, jp.log()[-3000:]
