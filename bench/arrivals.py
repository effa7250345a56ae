"""When records become visible on the target, and the pauses between them: the handoff bench's measure, read the
same way on local clusters (`handoff.py`) and on kind (`handoffkind.py`), which both import it from here."""
from __future__ import annotations

import threading
import time

from confluent_kafka import Consumer, TopicPartition

from sparkmirror.copying.reader import next_batch
from sparkmirror_dev.testing import unique_name


class Arrivals(threading.Thread):
    """Wall-clock times (ms) at which records become visible, read_committed, on the target topic: in all
    (`times`) and per partition (`by_partition`), where a pause is measured. A consumer of one partition sees its
    partition's gap, and a generation's lanes hand their partitions over one by one (on kind 23 s apart), so a
    topic-wide gap hides the handoff's pause behind the lane still copying."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.times: list[int] = []
        self.by_partition: dict[int, list[int]] = {}
        self._done = threading.Event()

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": unique_name("arrivals"),
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "fetch.wait.max.ms": 20, "topic.metadata.refresh.interval.ms": 1000})
        while not self._done.is_set():
            md = c.list_topics(self.topic, timeout=5).topics.get(self.topic)
            if md is not None and md.error is None and md.partitions:
                c.assign([TopicPartition(self.topic, p, 0) for p in md.partitions])
                break
            time.sleep(0.2)
        while not self._done.is_set():
            msgs = next_batch(c, 10000, 0.05)  # the time a record became visible, not 0-50 ms later
            if msgs:
                now = int(time.time() * 1000)
                for m in msgs:
                    if m.error() is None:
                        self.times.append(now)
                        self.by_partition.setdefault(m.partition(), []).append(now)
        c.close()

    def stop(self) -> None:
        self._done.set()
        self.join(10)

    def pause_ms(self, since_ms: int, until_ms: int) -> int:
        """The longest any partition went without a record becoming visible in [since, until]."""
        return partition_pause_ms(dict(self.by_partition), since_ms, until_ms)

    def pauses_between(self, changes: list[int], end_ms: int) -> list[int]:
        """One pause per change (from each until the next; the last until `end_ms`), the longest of any partition."""
        return pauses_between(dict(self.by_partition), changes, end_ms)


def pause_ms(times: list[int], since_ms: int, until_ms: int) -> int:
    """The largest gap between arrivals in [since, until], counting from the last arrival before `since` (from
    `since` when there is none); nothing visible in the window at all is one pause as long as the window."""
    window = [t for t in times if since_ms <= t <= until_ms]
    if not window:
        return until_ms - since_ms
    before = [t for t in times if t < since_ms][-1:] or [since_ms]
    ts = before + window
    return max(b - a for a, b in zip(ts, ts[1:]))


def partition_pause_ms(by_partition: dict[int, list[int]], since_ms: int, until_ms: int) -> int:
    """The longest pause (`pause_ms`) of any partition in [since, until]."""
    return max((pause_ms(times, since_ms, until_ms) for times in by_partition.values()), default=until_ms - since_ms)


def pauses_between(by_partition: dict[int, list[int]], changes: list[int], end_ms: int) -> list[int]:
    """One pause per change: from each change until the next one (the last: until `end_ms`), the longest of any
    partition (`partition_pause_ms`)."""
    return [partition_pause_ms(by_partition, a, b) for a, b in zip(changes, changes[1:] + [end_ms])]
