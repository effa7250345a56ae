"""Stopping a mirror's flow groups for a failover, at a consistent point.

Like a takeover (`handoff/takeover.py`), mark first, then fence:
1. a failover mark for the flow group on each target's progress topic (a key of its own, so no generation mark
   replaces it): every lane that initialises from now on reads it after its own fencing and stops
   (`copying.start.resume_positions`), whatever its worker generation;
2. `init_transactions` on every transactional id the newest generation's lanes held (and this config's own):
   their open transactions are aborted and they can commit nothing more.
After both, the progress topic says what the target holds, and it stays so until `failover --undo` (for
exactly-once mirrors; an at-least-once lane may land up to one commit interval of records after step 2, which
consumers on the target then read: at least once). A running driver sees the mark and exits.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from ..handoff.takeover import fence_all, marks_by_target, write_failover
from ..progress import read_progress
from ..progress.lag import CommittedCounter, partition_lags
from ..progress.state import ProgressState
from ..replication import policy_for
from ..resource.flowgroup import FlowGroupConfig, Mirror
from ..resource.names import transactional_ids
from ..topicplan import select_topics, topic_filter


@dataclass
class Stopped:
    """One flow group stopped (or let copy again, for `--undo`)."""

    flow_group: str
    fenced: list[str] = field(default_factory=list)
    at_ms: int = 0
    took_ms: int = 0
    already: bool = False  # it had been failed over before: the first failover's time is kept
    mirrors: list[str] = field(default_factory=list)  # every mirror the flow group carries: all of them stop

    def as_dict(self) -> dict:
        return {"flowGroup": self.flow_group, "fencedIds": self.fenced, "atMs": self.at_ms, "tookMs": self.took_ms,
                "alreadyFailedOver": self.already, "mirrors": self.mirrors}


def stop(config: FlowGroupConfig, mirrors: list[str], timeout: float = 60.0) -> Stopped:
    """Fail the flow group over: mark on every target, then fence (see the module docstring). Run again, it
    writes the mark where a failed run left it out and fences again (both idempotent)."""
    t0 = time.monotonic()
    of = (config.resource, config.resourceUid, config.name)
    states = marks_by_target(config, timeout)
    before = next((s.failovers[of] for s in states.values() if of in s.failovers), None)
    at_ms = int(before.get("atMs", 0)) if before else int(time.time() * 1000)
    marked_mirrors = sorted({*mirrors, *(before.get("mirrors") or [] if before else [])})
    held: dict[str, set[str]] = {}
    for alias, state in states.items():
        for a, tids in state.generation_ids.get(of, {}).items():
            held.setdefault(a, set()).update(tids)
        if of not in state.failovers:
            write_failover(config, alias, True, at_ms, marked_mirrors, timeout)
    for alias, tids in transactional_ids(config.resource, config.name, config.lane_routes()).items():
        held.setdefault(alias, set()).update(tids)
    ids = {(alias, tid) for alias, tids in held.items() if alias in states for tid in tids}
    fence_all(config, ids, timeout)
    return Stopped(config.name, sorted(t for _a, t in ids), at_ms, int((time.monotonic() - t0) * 1000),
                   before is not None, [m.name for m in config.mirrors])


def undo(config: FlowGroupConfig, timeout: float = 60.0) -> Stopped | None:
    """Let the flow group copy again after a failover (a drill, or a source that is primary again): the failover
    mark made inactive on every target. A driver started afterwards continues from what was committed. None when
    the flow group is not failed over."""
    of = (config.resource, config.resourceUid, config.name)
    states = marks_by_target(config, timeout)
    if not any(of in s.failovers for s in states.values()):
        return None
    at_ms = int(time.time() * 1000)
    for alias in states:
        write_failover(config, alias, False, at_ms, [], timeout)
    return Stopped(config.name, at_ms=at_ms, mirrors=[m.name for m in config.mirrors])


def mirror_progress(config: FlowGroupConfig, mirror: Mirror, timeout: float = 15.0) -> ProgressState:
    """The mirror's progress as its target holds it now (read to the end)."""
    return read_progress(config.cluster(mirror.target).client_config(), config.progressTopic, mirror.source,
                         timeout=timeout, resource=config.resource)


def mirror_lag(config: FlowGroupConfig, mirror: Mirror, timeout: float = 15.0,
               state: ProgressState | None = None) -> int:
    """Records of the mirror's source topics not committed on the target yet (`progress.lag`'s definition);
    `state`: the progress already read (else read now)."""
    source_conf = config.cluster(mirror.source).client_config()
    state = state if state is not None else mirror_progress(config, mirror, timeout)
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
