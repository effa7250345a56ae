"""`startFrom`: where a partition's first run starts when the mirror takes over from another copier.

The legacy MirrorMaker committed its source consumer group after producing, so everything below the group's
committed offset is already on the target (same topic name: identity replication policy). A partition without
progress starts there instead of at the beginning; records the old tool produced but had not committed are
copied again (duplicates, never losses). A partition the group never committed starts as without `startFrom`.
"""
from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient


def group_start_offsets(source_conf: dict[str, str], group: str, partitions: list[tuple[str, int]],
                        held: dict[tuple[str, int], tuple[int, int]], timeout: float = 30.0
                        ) -> dict[tuple[str, int], int]:
    """The committed offsets of `group` on the source for `partitions`, clamped to what the source holds
    (`held`: earliest, end); partitions the group has no offset for are left out."""
    if not partitions:
        return {}
    admin = AdminClient(source_conf)  # once per fresh lane with startFrom: not kept
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in partitions])
    answer = admin.list_consumer_group_offsets([req], request_timeout=timeout)[group].result(timeout=timeout)
    out: dict[tuple[str, int], int] = {}
    for tp in answer.topic_partitions:
        if tp.error is not None or tp.offset < 0:
            continue  # never committed by the group
        lo, hi = held[(tp.topic, tp.partition)]
        out[(tp.topic, tp.partition)] = min(max(tp.offset, lo), hi)
    return out
