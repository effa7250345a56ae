"""Consumer-group positions for a failover (I/O): translated now, or read from the last checkpoints.

Source reachable: each selected group's committed offsets are read from the source and translated through the
progress topic read to its end after the flow groups were stopped (so the map is final), with the same exact
translation as checkpoints (`checkpoints.translate`, counting inside gapped ranges on the source). The results
are also emitted as checkpoints, so `RemoteClusterUtils` on the target agrees with what was committed.

Source unreachable (the disaster case): the newest checkpoint per group and partition on the target's
`<source>.checkpoints.internal` topic, which the mirror emitted every `emitCheckpointsIntervalSeconds`: what a
group committed on the source after that is unknowable now, so its consumers repeat at most that interval.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from ..checkpoints import CheckpointEmitter, translate
from ..replication import GroupFilter
from ..mm2formats import Checkpoint
from ..progress.state import ProgressState
from ..replication import should_replicate_topic
from ..resource.flowgroup import FlowGroupConfig, Mirror
from ..sharegroups.moves import ConfigCarry, ShareMove
from ..topicplan import topic_filter
from .report import Untranslated

log = logging.getLogger(__name__)
PROBE_SECONDS = 5.0  # the longest the failover asks whether the source answers


def source_error(config: FlowGroupConfig, mirror: Mirror, timeout: float) -> str | None:
    """Why the source cannot be read now (None: it answers). One short probe: at most PROBE_SECONDS, and over
    as soon as every broker refused the connection (librdkafka tells that only its error callback); the
    failover then asks the source nothing more."""
    down: list[KafkaError] = []
    admin = AdminClient({**config.cluster(mirror.source).client_config(),
                         "error_cb": lambda e: down.append(e) if e.code() == KafkaError._ALL_BROKERS_DOWN else None})
    deadline = time.monotonic() + min(timeout, PROBE_SECONDS)
    while True:
        try:
            admin.list_topics(timeout=max(0.1, min(0.5, deadline - time.monotonic())))
            return None
        except KafkaException as e:
            why = e.args[0].str() if isinstance(e.args[0], KafkaError) else str(e)
        admin.poll(0)  # serves the error callback
        if down or time.monotonic() >= deadline:
            break
    why = down[0].str() if down else why
    return f"source cluster {mirror.source!r} ({config.cluster(mirror.source).bootstrapServers}) does not answer: {why}"


def translate_now(emitter: CheckpointEmitter, select: Callable[[str], bool], state: ProgressState
                  ) -> tuple[dict[str, list[Checkpoint]], dict[str, list[Untranslated]]]:
    """group -> checkpoints, and group -> partitions without an exact position, from the source's offsets now
    and `state`, the mirror's progress read after the stop (so its map is final)."""
    config, mirror = emitter.config, emitter.mirror
    maps = {(t, p): m for (c, t, p), m in state.maps.items() if (c, t, p) in state.latest}
    mirrored = topic_filter(config, mirror)
    checkpoints: dict[str, list[Checkpoint]] = {}
    untranslated: dict[str, list[Untranslated]] = {}
    for group in emitter.source_groups():
        if not select(group):
            continue
        for (topic, part), (offset, metadata) in sorted(emitter.committed(emitter.source_admin, group).items()):
            if offset < 0 or ((topic, part) not in maps and
                              not should_replicate_topic(emitter.policy, mirrored, topic, mirror.target)):
                continue  # no committed offset, or a topic this mirror does not copy (e.g. the reverse's own)
            cps = translate(group, {(topic, part): (offset, metadata)}, maps, emitter.counter, emitter.counter.between)
            if cps:
                checkpoints.setdefault(group, []).extend(cps)
                continue
            m = maps.get((topic, part))
            if m is None or not m.records:
                why = "nothing of this partition was mirrored yet"
            elif offset < m.records[0].source_first:
                why = (f"offset {offset} is older than the progress history held (from source offset "
                       f"{m.records[0].source_first})")
            else:
                why = "the records of its committed range could not be counted on the source (see the log)"
            untranslated.setdefault(group, []).append(Untranslated(group, topic, part, offset, why))
    return checkpoints, untranslated


def share_groups_now(emitter: CheckpointEmitter, select: Callable[[str], bool], state: ProgressState,
                     leave: Callable[[str, str, int], bool] | None = None
                     ) -> tuple[list[ShareMove], str, dict[str, ConfigCarry]]:
    """The selected share groups' start offsets on the source now, translated through `state`'s final map and set
    on the target (asked again there, whatever the checkpoint rounds set), with their configs (per group); with
    why none could be, when the source or target serves no share groups."""
    config, mirror = emitter.config, emitter.mirror
    maps = {(t, p): m for (c, t, p), m in state.maps.items() if (c, t, p) in state.latest}
    mirrored = topic_filter(config, mirror)
    rows = emitter.share_moves(select, maps, lambda t: should_replicate_topic(emitter.policy, mirrored, t,
                                                                               mirror.target))
    if leave is not None:
        rows = [r for r in rows if not leave(r.group, r.source_topic, r.partition)]
    if not rows:
        return [], emitter.shares_note or (emitter.shares.unsupported if emitter.shares is not None else "") or "", {}
    rows = emitter.shares.apply(rows, force=True)
    groups = {r.group for r in rows}
    return rows, emitter.shares.unsupported or "", {g: c for g, c in emitter.shares.carried.items() if g in groups}


def last_checkpoints(config: FlowGroupConfig, mirror: Mirror, select: Callable[[str], bool], topic: str,
                     timeout: float) -> tuple[dict[str, list[Checkpoint]], dict[str, int]]:
    """(group -> the newest checkpoint of each of its partitions on the target's checkpoints topic, group -> when
    the newest of them was written, epoch ms: the group's position as the mirror last knew it; a round writes
    only what changed, so a group that did not move since has an older one)."""
    groups = GroupFilter.of(mirror)
    c = Consumer({**config.cluster(mirror.target).client_config(), "group.id": f"sparkmirror-failover-"
                  f"{uuid.uuid4().hex[:8]}", "enable.auto.commit": False, "enable.partition.eof": True})
    newest: dict[tuple[str, str, int], Checkpoint] = {}
    written: dict[str, int] = {}
    try:
        md = c.list_topics(topic, timeout=timeout).topics.get(topic)
        if md is None or md.error is not None:
            raise RuntimeError(f"target cluster {mirror.target!r} has no checkpoints topic {topic!r}: the mirror "
                               "emitted none (emitCheckpoints off, or it never ran a checkpoint interval), so with "
                               "the source unreachable no group can be translated")
        open_ = set(md.partitions)
        c.assign([TopicPartition(topic, p, -2) for p in md.partitions])  # -2: from the beginning
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in md.partitions}
        open_ = {p for p in open_ if ends[p] > 0}
        quiet_until = time.monotonic() + timeout
        while open_:
            # short waits: librdkafka's batch consume returns early only for a full batch, so one consume of
            # `timeout` made every failover from checkpoints wait that long (30 s by default)
            msgs = c.consume(500, timeout=0.1)
            if not msgs:
                if time.monotonic() > quiet_until:
                    raise TimeoutError(f"reading checkpoints topic {topic!r} on target {mirror.target!r}: no answer "
                                       f"within {timeout:.0f} s")
                continue
            quiet_until = time.monotonic() + timeout
            for m in msgs:
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        open_.discard(m.partition())
                        continue
                    raise KafkaException(m.error())
                if m.offset() >= ends[m.partition()] - 1:
                    open_.discard(m.partition())
                if m.key() is None or m.value() is None:
                    continue
                try:
                    cp = Checkpoint.decode(m.key(), m.value())
                except ValueError as e:  # not ours to judge: another writer's record; skipped, and said
                    log.warning("checkpoints topic %s offset %d: not a checkpoint (%s); skipped", topic, m.offset(), e)
                    continue
                if groups.matches(cp.group) and select(cp.group):
                    newest[(cp.group, cp.topic, cp.partition)] = cp
                    written[cp.group] = max(written.get(cp.group, 0), m.timestamp()[1])
    finally:
        c.close()
    out: dict[str, list[Checkpoint]] = {}
    for (group, _t, _p), cp in sorted(newest.items()):
        out.setdefault(group, []).append(cp)
    return out, written


def on_target(emitter: CheckpointEmitter, groups: list[str]) -> tuple[dict[str, int], dict[str, dict]]:
    """(group -> active members on the target, group -> its committed offsets there)."""
    members = emitter.members_on_target(groups)
    committed = {g: {k: off for k, (off, _md) in emitter.committed(emitter.target_admin, g).items()} for g in groups}
    return members, committed


def commit(emitter: CheckpointEmitter, offsets: dict[str, dict[tuple[str, int], int]]) -> dict[str, str]:
    """Commit the offsets on the target; group -> error for those that could not be (e.g. a consumer joined)."""
    errors = {}
    for group, todo in sorted(offsets.items()):
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(todo.items())])
        fut = emitter.target_admin.alter_consumer_group_offsets([req], request_timeout=emitter.timeout)[group]
        try:
            res = fut.result(timeout=emitter.timeout)
            bad = [tp for tp in res.topic_partitions if tp.error is not None]
            if bad:
                errors[group] = f"{bad[0].topic}[{bad[0].partition}]: {bad[0].error}"
        except KafkaException as e:
            errors[group] = str(e.args[0])
    return errors
