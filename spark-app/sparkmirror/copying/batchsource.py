"""A batch lane's source reader: where batches are read (batchreader.py's Fetch at read_committed, on the wire),
shaped as the lane's parts expect a reader (reader.py's `SourceReader`): opened, assigned the committed
positions, taken over by the lane's next epoch, closed, and the lane's reach and end-of-epoch figures.

One Fetch is always under way while the lane produces the last one's batches (`read`): the source works on
the next answer while the target takes this one. A source that does not answer is `Unreachable` (the lane
waits for it in `read`, as the record path's consumer does); a refusal is a `CopyError`."""
from __future__ import annotations

import logging
import time

from ..outage import Backoff, Outage
from ..progress import partition_lag
from ..resource.clientconf import BATCH_FETCH_KEYS
from ..wire.cluster import RECEIVE_MAX_BYTES, Wire
from .batchreader import BatchReader, Fetched
from .context import LaneContext
from .errors import Unreachable
from .shares import PartitionKey
from .summary import PartitionSummary
from .wiretalk import wire_talk

log = logging.getLogger(__name__)

FETCH_WAIT_MS = 50
"""How long the source holds a Fetch that has nothing new (the record path's consumer waits as long)."""
SOURCE_RETRY_CAP_S = 2.0
"""Longest wait between two tries of a source that does not answer: the loop commits what it copied meanwhile,
and a source back is read again within this (the lane's own backoff, for a fresh start, goes up to 30 s)."""


class BatchSource:
    """The lane's connections to its source and the positions it reads from."""

    def __init__(self, ctx: LaneContext, outage: Outage, backoff: Backoff) -> None:
        self.ctx, self.outage, self.backoff = ctx, outage, backoff
        self.wire: Wire | None = None
        self.consumer: BatchReader | None = None  # named as the record path's, for the lane's checks
        self.high_watermarks: dict[PartitionKey, int] = {}
        self.reach: dict[PartitionKey, int] = {}  # see reader.SourceReader.reach
        self._source_backoff = Backoff()

    def _talk(self, what: str):
        return wire_talk("source", self.ctx.mirror.source, what)

    def open(self) -> None:
        with self._talk("connecting"):
            fetch = fetch_settings(self.ctx.consumer_conf)
            receive = max(RECEIVE_MAX_BYTES, fetch.get("max_bytes", 0) + (1 << 20))  # a Fetch answer fits
            self.wire = Wire(self.ctx.source_conf, client_id=self.ctx.tid, receive_message_max_bytes=receive)
        self.consumer = BatchReader(self.wire, self.ctx.mirror.source, **fetch)

    def assign(self, positions: dict[PartitionKey, int]) -> None:
        assert self.consumer is not None
        with self._talk("reading the source's metadata"):
            self.consumer.assign(positions)

    def add(self, positions: dict[PartitionKey, int]) -> None:
        """Read partitions the lane gained too, the others from where they are (the Fetch under way goes on)."""
        assert self.consumer is not None
        with self._talk("reading the source's metadata"):
            self.consumer.add(positions)

    def take(self, kept: BatchSource, committed: dict[PartitionKey, int]) -> None:
        """Continue with the connections of the lane's previous copier, from the committed positions."""
        self.wire, kept.wire = kept.wire, None
        self.consumer, kept.consumer = kept.consumer, None
        self.high_watermarks = kept.high_watermarks
        self.rewind_to(committed)

    def rewind_to(self, committed: dict[PartitionKey, int]) -> None:
        assert self.consumer is not None
        if self.consumer.positions != committed:
            with self._talk("reading the source's metadata"):
                self.consumer.assign(committed)

    def unassign(self) -> None:
        """Stop fetching: the answer under way is read and dropped."""
        if self.consumer is not None:
            self.consumer.assign({})

    def close(self, committed: dict[PartitionKey, int]) -> None:
        self.note_reach(committed)
        if self.wire is not None:
            self.wire.close()
        self.wire = self.consumer = None

    def note_reach(self, committed: dict[PartitionKey, int]) -> None:
        reach = self.reach
        positions = self.consumer.positions if self.consumer is not None else {}
        for k, o in (*committed.items(), *positions.items()):
            if o > reach.get(k, -1):
                reach[k] = o

    def read(self) -> dict[PartitionKey, Fetched]:
        """The answer to the Fetch under way (sent now if none is), and the next one sent. A source that does
        not answer is waited for here, as the record path's consumer waits by itself: the lane keeps its target
        clients and positions, says so once (`outage`) and reads on when the source is back."""
        assert self.consumer is not None
        try:
            with self._talk("fetching"):
                got = self.consumer.receive()
                self.consumer.send()
        except Unreachable as e:
            line = self.outage.failed("source", e.what, e.reason)
            if line:
                log.warning("%s", line)
            self.consumer.forget_leaders()  # the next read asks the source who leads, once it answers
            time.sleep(min(self._source_backoff.next(), SOURCE_RETRY_CAP_S))
            return {}
        if "source" in self.outage.down:
            self._source_backoff.reset()
            line = self.outage.answered("source")
            if line:
                log.warning("%s", line)
        for k, f in got.items():
            self.high_watermarks[k] = f.high_watermark
        return got

    def probe_when_due(self) -> None:
        """Nothing to probe: a source that stops answering ends the lane's clients (`Unreachable`)."""

    def end_offsets_and_lag(self, summaries: dict[PartitionKey, PartitionSummary],
                            committed: dict[PartitionKey, int]) -> None:
        """Each summary's end offset, next offset and lag from the last Fetch answers (as reader.py's); the
        driver's monitor counts the exact figures."""
        for key, s in summaries.items():
            hi = self.high_watermarks.get(key, -1)
            s.source_end = hi
            s.next_offset = committed.get(key, s.next_offset)
            # log start 0: the position is the next offset (reader.py's fallback); -1: unknown
            s.lag = partition_lag(0, hi, s.next_offset) if hi >= 0 and s.next_offset >= 0 else -1


def fetch_settings(conf: dict[str, str]) -> dict[str, int]:
    """The Fetch sizes and wait the mirror's consumer keys set (`BATCH_FETCH_KEYS`), as `BatchReader` takes them: the
    record path's consumer honours the same keys, so a tuned mirror fetches alike on either path."""
    out = {"max_wait_ms": FETCH_WAIT_MS}
    out.update({arg: int(conf[key]) for key, arg in BATCH_FETCH_KEYS.items() if key in conf})
    return out
