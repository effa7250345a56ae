"""Low and high watermarks of a lane's partitions in one ListOffsets request per leader.

The consumer's `get_watermark_offsets` costs a round trip per partition: a lane of 500 partitions spent about
30 s ending each epoch and 3 s starting one (bench/scale.py, 1,000 topics). The admin clients are kept per
cluster config by the Python worker, as the lanes' kept clients are.
"""
from __future__ import annotations

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

_ADMINS: dict[str, AdminClient] = {}


def admin_for(conf: dict[str, str]) -> AdminClient:
    """One AdminClient per cluster config in this process (metadata and connections shared by its lanes)."""
    key = repr(sorted(conf.items()))
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient(conf)
    return _ADMINS[key]


def watermarks(conf: dict[str, str], partitions: list[tuple[str, int]], timeout: float
               ) -> dict[tuple[str, int], tuple[int, int] | KafkaException]:
    """(earliest offset, last stable offset) per partition, as a read_committed consumer's
    `get_watermark_offsets` gives them; a partition whose request failed maps to its error."""
    if not partitions:
        return {}
    admin = admin_for(conf)
    tps = [TopicPartition(t, p) for t, p in partitions]
    low = admin.list_offsets({tp: OffsetSpec.earliest() for tp in tps}, request_timeout=timeout,
                             isolation_level=IsolationLevel.READ_COMMITTED)
    high = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=timeout,
                              isolation_level=IsolationLevel.READ_COMMITTED)
    low_by = {(k.topic, k.partition): f for k, f in low.items()}
    high_by = {(k.topic, k.partition): f for k, f in high.items()}
    out: dict[tuple[str, int], tuple[int, int] | KafkaException] = {}
    for key in partitions:
        try:
            out[key] = (low_by[key].result(timeout=timeout + 5).offset, high_by[key].result(timeout=timeout + 5).offset)
        except KafkaException as e:
            out[key] = e
        except TimeoutError:  # as the consumer's call reports it, so that the same errors count as transient
            out[key] = KafkaException(KafkaError(KafkaError._TIMED_OUT, f"listing offsets took over {timeout:.0f} s"))
    return out
