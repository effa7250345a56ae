"""Stopping a mirror's flow groups for a failover, at a consistent point.

The same two steps as a takeover (`handoff/takeover.py`), with a generation that holds no lanes:
1. a generation mark one above the newest, with "failover" set, on each target's progress topic: every lane
   that initialises from now on reads it after its own fencing and stops (`copying.start.resume_positions`);
2. `init_transactions` on every transactional id the newest generation's lanes held (and this config's own):
   their open transactions are aborted and they can commit nothing more.
After both, the progress topic says exactly what the target holds, and it stays so: a driver that starts later
refuses to copy the flow group (`failover --undo` lets it again).
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from ..handoff.takeover import fence_all, newest_mark, write_mark
from ..progress import read_progress
from ..progress.lag import CommittedCounter, partition_lags
from ..replication import policy_for
from ..resource.flowgroup import FlowGroupConfig, Mirror
from ..resource.names import transactional_ids
from ..topicsync import select_topics, topic_filter


@dataclass
class Stopped:
    """One flow group stopped (or let copy again, for `--undo`)."""

    flow_group: str
    generation: int
    fenced: list[str] = field(default_factory=list)
    at_ms: int = 0
    took_ms: int = 0
    already: bool = False  # it had been failed over before: nothing was written this time
    mirrors: list[str] = field(default_factory=list)  # every mirror the flow group carries: all of them stop

    def as_dict(self) -> dict:
        return {"flowGroup": self.flow_group, "generation": self.generation, "fencedIds": self.fenced,
                "atMs": self.at_ms, "tookMs": self.took_ms, "alreadyFailedOver": self.already,
                "mirrors": self.mirrors}


def stop(config: FlowGroupConfig, mirrors: list[str], timeout: float = 60.0) -> Stopped:
    """Fail the flow group over: mark, then fence (see the module docstring). Idempotent: a group already failed
    over is fenced again (cheap) and keeps its mark."""
    t0 = time.monotonic()
    last, failover = newest_mark(config, timeout)
    targets = sorted({m.target for m in config.mirrors})
    held = dict(last.transactionalIds) if last is not None else {}
    for alias, tids in transactional_ids(config.resource, config.name, config.lane_routes()).items():
        held[alias] = sorted({*held.get(alias, []), *tids})
    ids = {(alias, tid) for alias, tids in held.items() if alias in targets for tid in tids}
    if failover is not None and last is not None:
        fence_all(config, ids, timeout)
        return Stopped(config.name, last.generation, sorted(t for _a, t in ids), int(failover.get("atMs", 0)),
                       int((time.monotonic() - t0) * 1000), True, [m.name for m in config.mirrors])
    generation = max(last.generation if last is not None else 0, config.worker.generation) + 1
    at_ms = int(time.time() * 1000)
    for alias in targets:
        write_mark(config, alias, [config.name], at_ms, timeout, go=False, generation=generation, ids={},
              failover={"atMs": at_ms, "mirrors": sorted(mirrors)})
    fence_all(config, ids, timeout)
    return Stopped(config.name, generation, sorted(t for _a, t in ids), at_ms, int((time.monotonic() - t0) * 1000),
                   mirrors=[m.name for m in config.mirrors])


def undo(config: FlowGroupConfig, timeout: float = 60.0) -> Stopped | None:
    """Let the flow group copy again after a failover (a drill, or a source that is primary again): a generation
    mark above the failover's without "failover". A `sparkmirror run` started afterwards continues from what was
    committed. None when the flow group is not failed over."""
    last, failover = newest_mark(config, timeout)
    if failover is None or last is None:
        return None
    at_ms = int(time.time() * 1000)
    for alias in sorted({m.target for m in config.mirrors}):
        write_mark(config, alias, [config.name], at_ms, timeout, go=False, generation=last.generation + 1, ids={})
    return Stopped(config.name, last.generation + 1, at_ms=at_ms)


def mirror_lag(config: FlowGroupConfig, mirror: Mirror, timeout: float = 15.0) -> int:
    """Records of the mirror's source topics not committed on the target yet (`progress.lag`'s definition)."""
    source_conf = config.cluster(mirror.source).client_config()
    state = read_progress(config.cluster(mirror.target).client_config(), config.progressTopic, mirror.source,
                          timeout=timeout, resource=config.resource)
    c = Consumer({**source_conf, "group.id": f"sparkmirror-failover-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    counter = CommittedCounter(source_conf, min(timeout, 5.0))
    try:
        md = c.list_topics(timeout=timeout)
        topics = select_topics(policy_for(mirror), topic_filter(config, mirror), md.topics, mirror.target)
        marks = {(t, p): c.get_watermark_offsets(TopicPartition(t, p), timeout=timeout)
                 for t in topics for p in md.topics[t].partitions}
        nxt = {k: r.next_offset if (r := state.latest.get((mirror.source, *k))) else None for k in marks}
        return sum(partition_lags(marks, nxt, counter.count).values())
    finally:
        counter.close()
        c.close()


def wait_caught_up(config: FlowGroupConfig, mirror: Mirror, seconds: float, timeout: float = 15.0) -> int:
    """Poll the mirror's lag until it is 0 or `seconds` pass; returns the last lag (0: caught up)."""
    deadline = time.monotonic() + seconds
    while True:
        lag = mirror_lag(config, mirror, timeout)
        if lag == 0 or time.monotonic() >= deadline:
            return lag
        time.sleep(1.0)
