"""The pause a handoff makes visible to a user of the target: from the last records the generation(s) handed over
from committed to the first records the new generation committed, for its flow group.

Read from the progress topic, where every committed range carries its `commitMs`, generation and flow group
(`progress/record.py`), not from record latencies: the longest a record waited from its source timestamp also
counts the backlog the new generation works off and the commit cadence, so it is not the gap a consumer of the
target sees. Both ends are the lanes' clocks (executors of two generations on the same nodes, or NTP apart).

Read as the new generation starts (the predecessors' last ranges are the newest of their keys then, so
compaction cannot have removed them), then every `EVERY_S` until its own first range is read: each read takes
only what was committed since the last one.
"""
from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaException

from ..progress.reader import ProgressReader
from ..progress.record import SourcePartition
from ..resource.flowgroup import FlowGroupConfig

log = logging.getLogger(__name__)

EVERY_S = 0.5
"""How often the progress topic is read until the new generation's first commit is seen."""


def visible_pause(spans: dict[tuple[str, int, SourcePartition], tuple[int, int]], me: tuple[str, int],
                  before: set[tuple[str, int]]) -> int | None:
    """The longest gap, over the source partitions both sides committed records of, from the predecessors' last
    commit of a partition to generation `me`'s first (`spans`: ProgressState.commit_spans). Per partition: lanes
    take over one by one (on kind one lane's partitions went seconds after another's), so one flow-group-wide
    first and last overlap. None until every partition the predecessors committed has been committed by `me`."""
    mine = {sp: first for (group, gen, sp), (first, _) in spans.items() if (group, gen) == me}
    theirs: dict[SourcePartition, int] = {}
    for (group, gen, sp), (_, last) in spans.items():
        if (group, gen) in before:
            theirs[sp] = max(theirs.get(sp, last), last)
    gaps = [mine[sp] - theirs[sp] for sp in mine.keys() & theirs.keys()]
    if not gaps:
        return None
    # below 0: a same-named earlier resource's ranges of this generation number (a progress topic reused)
    return max(gaps) if min(gaps) >= 0 else None


class PauseClock:
    """The visible pause of one flow group's handoff to `config`'s generation, measured by reading its targets'
    progress topic; `None` while unknown (no predecessors, nothing committed by either side, or a read failed:
    the measure is a report, never in the way of the copy or of the takeover report)."""

    def __init__(self, config: FlowGroupConfig, timeout: float = 10.0) -> None:
        self.config, self.timeout = config, timeout
        self.before = {(p.flowGroup, p.generation) for p in config.worker.predecessors}
        self.readers: list[ProgressReader] = []
        self.pause: int | None = None
        self.done = not self.before  # a first generation hands nothing over
        self._last_read = 0.0

    def read(self, final: bool = False) -> int | None:
        """Read what was committed since the last read (at most every EVERY_S unless `final`); the pause when
        `final` (the first epoch after the takeover ended: every lane committed), None before: a lane that took
        its partitions over later than another would be left out of an earlier reading."""
        if self.done or (not final and time.monotonic() - self._last_read < EVERY_S):
            return self.pause
        self._last_read = time.monotonic()
        try:
            if not self.readers:
                self.readers = [ProgressReader(self.config.cluster(alias).client_config(), self.config.progressTopic,
                                               purpose="pause", resource=self.config.resource)
                                for alias in sorted({m.target for m in self.config.mirrors})]
            for r in self.readers:
                r.read_to_end(self.timeout)
        except (KafkaException, TimeoutError, RuntimeError) as e:
            log.warning("flow group %s: the handoff's pause is not measured: reading the progress topic: %s",
                        self.config.name, e)
            self.close()
            return None
        if final:
            self.pause = self._measured()
            self.close()
        return self.pause

    def _measured(self) -> int | None:
        spans: dict[tuple[str, int, SourcePartition], tuple[int, int]] = {}
        for r in self.readers:
            for of, (first, last) in r.state.commit_spans.items():
                a, b = spans.get(of, (first, last))
                spans[of] = (min(a, first), max(b, last))
        return visible_pause(spans, (self.config.name, self.config.worker.generation), self.before)

    def close(self) -> None:
        self.done = True
        for r in self.readers:
            r.close()
        self.readers = []
