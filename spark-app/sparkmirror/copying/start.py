"""What a fresh lane starts from: its clients' settings, the target's record size limits, its resume offsets.

Resume offsets come from the progress topic (read only after the commit protocol fenced older copies, see
commit.py) and are checked against what the source still holds: below its earliest offset the records were
deleted before being mirrored, beyond its end the topic was recreated. The topic ids the last progress record
carries are compared with the topics' ids now: a source topic deleted and created again (also while the
mirror was stopped, when its offsets may already be past the committed one) or a remote topic deleted and
created again (what was mirrored into it is gone) is caught even where the offsets look plausible.
`sourceGapPolicy: fail` (default) raises `SourceGapError` naming the partition and what happened; `skip` logs
it loudly and continues: at the new source topic's earliest offset, or at the committed offset when only the
remote topic is new (the records mirrored before are not copied again).
"""
from __future__ import annotations

import logging
import time

from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

from ..progress import read_progress
from ..resource.flowgroup import FlowGroupConfig, Mirror
from ..startfrom import group_start_offsets
from ..topicsync import topic_ids
from .admins import kept_admin
from .errors import CopyError, SourceGapError, Superseded, talking_to, transient_reason

log = logging.getLogger(__name__)


NEW_TOPIC_SECONDS = 30.0
"""How long a remote topic the sync has just created may stay unknown to the broker a lane asks: a broker
applies the controller's records a moment after CreateTopics returned (seconds for thousands of partitions)."""


def target_max_message_bytes(target_conf: dict[str, str], topics: set[str],
                             unknown_for: float = NEW_TOPIC_SECONDS) -> dict[str, int]:
    """The target topics' max.message.bytes: the batch size must not exceed it, and errors quote it."""
    admin = kept_admin(target_conf) if topics else None
    out: dict[str, int] = {}
    left = sorted(topics)
    deadline = time.monotonic() + unknown_for
    while left:
        assert admin is not None
        unknown: list[str] = []
        for r, fut in admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, t) for t in left]).items():
            try:
                out[r.name] = int(fut.result(timeout=30)["max.message.bytes"].value)
            except KafkaException as e:
                if transient_reason(e):
                    raise  # the caller waits it out
                if e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART and time.monotonic() < deadline:
                    unknown.append(r.name)
                    continue
                raise CopyError(f"target topic {r.name!r} cannot be described on the target cluster: "
                                f"{e.args[0].str()}") from e
        if unknown:
            log.info("%d target topics (%s) not known to the target's broker yet: asking again", len(unknown),
                     unknown[0])
            time.sleep(0.5)
        left = unknown
    return out


def new_producer(config: FlowGroupConfig, target_conf: dict[str, str], tid: str, max_bytes: dict[str, int],
                 transactional: bool) -> Producer:
    """A producer for the lane's target; a transactional one holds the lane's transactional.id `tid`.

    `target_conf` may carry the user's producer settings (resource/clientconf.py): they win over the mirror's
    defaults (batch.size capped by the remote topics' max.message.bytes), never over what the mirror owns (the
    plan refuses those by name)."""
    cap = max(min([1_000_000, *max_bytes.values()]) - 512, 1024)
    conf: dict[str, object] = {"enable.idempotence": True, "client.id": tid, **target_conf}
    try:
        conf["batch.size"] = min(int(str(conf.get("batch.size", cap))), cap)
    except ValueError:  # not a number: librdkafka refuses it, naming the property
        pass
    conf.update({"acks": "all", "linger.ms": config.lingerMs, "message.max.bytes": 100 * 1024 * 1024,
                 "partitioner": "murmur2_random"})
    if transactional:
        conf["enable.idempotence"] = True
        conf.update({"transactional.id": tid, "transaction.timeout.ms": config.transactionTimeoutMs,
                     "message.timeout.ms": min(config.transactionTimeoutMs, 300000)})
    return Producer(conf)


@dataclass
class TopicIds:
    """The Kafka topic ids (KIP-516) of a lane's source and remote topics, stamped on its progress records."""

    source: dict[str, str] = field(default_factory=dict)
    target: dict[str, str] = field(default_factory=dict)


def lane_topic_ids(config: FlowGroupConfig, mirror: Mirror, route: dict[tuple[str, int], str]) -> TopicIds:
    with talking_to("source", mirror.source, "describing the source topics"):
        source = topic_ids(kept_admin(config.cluster(mirror.source).client_config()), {t for t, _ in route})
    with talking_to("target", mirror.target, "describing the remote topics"):
        target = topic_ids(kept_admin(config.cluster(mirror.target).client_config()), set(route.values()))
    return TopicIds(source, target)


def resume_positions(config: FlowGroupConfig, mirror: Mirror, partitions: list[tuple[str, int]],
                     ids: TopicIds | None = None, route: dict[tuple[str, int], str] | None = None
                     ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], tuple[int, int]]]:
    """Resume offsets from the progress topic, checked against what the source still holds and against the
    topic ids the last progress record carries (`ids`: the topics' ids now; `route`: their remote topics);
    and the (records, bytes) totals the next progress records carry on."""
    target_conf = config.cluster(mirror.target).client_config()
    with talking_to("target", mirror.target, f"reading progress topic {config.progressTopic}"):
        state = read_progress(target_conf, config.progressTopic, mirror.source, partitions,
                              resource=config.resource, log_end=True)  # after init_transactions: see reader.py
    why = state.superseded_why(config.resource, config.resourceUid, config.name, config.worker.generation)
    if why is not None:  # read after this lane's fencing: see handoff/takeover.py
        raise Superseded(why)
    resume = state.resume_offsets(mirror.source)
    ids = ids or TopicIds()
    positions: dict[tuple[str, int], int] = {}
    with talking_to("source", mirror.source, f"reading the offsets of {len(partitions)} partitions"):
        held = offsets_held(config.cluster(mirror.source).client_config(), partitions)
    fresh = [k for k in partitions if k not in resume]
    if mirror.startFrom and fresh:  # taking over from another copier: its group's offsets, see startfrom.py
        with talking_to("source", mirror.source, f"reading consumer group {mirror.startFrom!r}'s offsets"):
            resume = {**group_start_offsets(config.cluster(mirror.source).client_config(), mirror.startFrom,
                                            fresh, held), **resume}
    for (topic, part) in partitions:
        lo, hi = held[(topic, part)]
        nxt = resume.get((topic, part))
        last = state.latest.get((mirror.source, topic, part))
        remote = (route or {}).get((topic, part), last.target_topic if last else "")
        if last is not None and _replaced(last.source_topic_id, ids.source.get(topic)):
            positions[(topic, part)] = _gap(config, mirror, topic, part, lo, (
                f"the source topic was deleted and created again since offset {nxt} was committed (topic id "
                f"{last.source_topic_id} -> {ids.source[topic]}): its offsets start over"))
        elif last is not None and remote == last.target_topic and \
                _replaced(last.target_topic_id, ids.target.get(remote)):
            positions[(topic, part)] = _gap(config, mirror, topic, part, nxt, (
                f"the remote topic {mirror.target}/{remote} was deleted and created again since offset {nxt} was "
                f"committed (topic id {last.target_topic_id} -> {ids.target[remote]}): what was mirrored into "
                f"it before is gone"), lost="the records mirrored before are NOT copied again")
        elif nxt is None:
            positions[(topic, part)] = lo  # never mirrored: from the beginning, as MM2 does
        elif nxt < lo or nxt > hi:
            why = (f"the source no longer holds offsets {nxt}..{lo - 1} (earliest held is {lo}): they were "
                   f"deleted before being mirrored" if nxt < lo else
                   f"the committed next offset {nxt} is beyond the source's end offset {hi}: the topic was "
                   f"recreated or truncated")
            positions[(topic, part)] = _gap(config, mirror, topic, part, lo, why)
        else:
            positions[(topic, part)] = nxt
    return positions, state.resume_totals(mirror.source)


_NO_LEADER_YET = (KafkaError._NOENT, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                  KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART,
                  KafkaError.OFFSET_NOT_AVAILABLE)


def offsets_unsettled(held: dict[tuple[str, int], tuple[int, int]]) -> list[tuple[str, int]]:
    """Partitions whose (earliest, end) offsets are librdkafka's sentinels (negative), not offsets. Right after a
    source broker restart ListOffsets once answered end offset -1001 (OFFSET_INVALID) with no error for a partition
    whose leader had just moved; read as an offset, it made a committed position look beyond the end and ended
    the chaos campaign's mirror as a truncated topic (sourceGapPolicy=fail). Such answers are asked for again."""
    return [k for k, (lo, hi) in held.items() if lo < 0 or hi < 0]


def offsets_held(source_conf: dict[str, str], partitions: list[tuple[str, int]], timeout: float = 30.0,
                 sleep: float = 0.5) -> dict[tuple[str, int], tuple[int, int]]:
    """(earliest, end) offsets of the partitions a lane was planned with: one metadata request, then two
    ListOffsets requests per leader. One request per partition made a fresh lane of 5,000 partitions spend 22 s
    starting (bench/scale).

    A partition the cluster does not know yet (a fresh client right after a source outage: the chaos campaign's
    mirror ended on it once, after a 75-s outage; a partition added a moment ago) or without a leader for a
    moment is asked for again for up to `timeout` s before its error stands, naming it (the topic deleted since
    the plan: a permanent error, as before). The metadata comes first because librdkafka fails the whole
    ListOffsets request, every partition of it, when one partition is unknown."""
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    admin = kept_admin(source_conf)
    deadline = time.monotonic() + timeout
    while True:
        md = admin.list_topics(timeout=max(deadline - time.monotonic(), 1.0))
        missing = [(t, p) for t, p in wanted
                   if t not in md.topics or md.topics[t].error is not None or p not in md.topics[t].partitions]
        if missing and time.monotonic() + sleep >= deadline:
            t, p = missing[0]
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                            f"source partition {t}/{p}{more} not known after {timeout:.0f} s"))
        if not missing:
            tps = [TopicPartition(t, p) for t, p in wanted]
            try:
                lows = _offsets(admin, tps, OffsetSpec.earliest(), timeout)
                highs = _offsets(admin, tps, OffsetSpec.latest(), timeout)
                held = {k: (lo, highs[k]) for k, lo in lows.items()}
                unsettled = offsets_unsettled(held)
                if not unsettled:
                    return held
                (t, p), (lo, hi) = unsettled[0], held[unsettled[0]]
                raise KafkaException(KafkaError(KafkaError.OFFSET_NOT_AVAILABLE, (
                    f"source partition {t}/{p} answered offsets {lo}..{hi}, not real ones"
                    + (f" (and {len(unsettled) - 1} more)" if len(unsettled) > 1 else ""))))
            except KafkaException as e:
                if e.args[0].code() not in _NO_LEADER_YET:
                    raise
                if time.monotonic() + sleep >= deadline:
                    # the metadata just listed every partition, so this is a cluster still electing leaders (the
                    # chaos campaign's source had none for 31 s after all 3 brokers were back), not a deleted topic
                    # (the next look's metadata names that): a fault the lane waits out, never the mirror's end
                    raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE, (
                        f"source partitions without a leader for {timeout:.0f} s: {e.args[0].str()}"))) from e
                log.info("source partitions without a leader for a moment (%s); asking again", e.args[0].str())
        else:
            log.info("%d source partitions (%s/%d) not known to the cluster yet; asking again", len(missing),
                     *missing[0])
        time.sleep(sleep)


def _offsets(admin: AdminClient, tps: list[TopicPartition], spec: OffsetSpec, timeout: float
             ) -> dict[tuple[str, int], int]:
    futs = admin.list_offsets({tp: spec for tp in tps}, request_timeout=timeout)
    return {(tp.topic, tp.partition): fut.result(timeout=timeout).offset for tp, fut in futs.items()}


def _replaced(before: str, now: str | None) -> bool:
    """A topic id recorded and a different one now: the topic was deleted and created again in between."""
    return bool(before and now and before != now)


def _gap(config: FlowGroupConfig, mirror: Mirror, topic: str, part: int, lo: int, why: str,
         lost: str = "the skipped range is LOST on the target") -> int:
    msg = (f"mirror {mirror.name!r}: source {mirror.source}/{topic} partition {part}: {why} "
           f"(sourceGapPolicy={config.sourceGapPolicy})")
    if config.sourceGapPolicy == "fail":
        raise SourceGapError(msg)
    log.error("%s; continuing from offset %d, %s", msg, lo, lost)
    return lo
