"""Where a lane's interval is committed: its records' acks awaited, its progress records written and the commit
protocol's transaction ended (commit.py says what each protocol's transactions hold).

Exactly-once commits in the loop: the interval's records are in the transaction, so the loop waits for their
acks (their target offsets go into the progress records) and commits. At-least-once commits are pipelined:
its records are visible once acknowledged and only their progress waits. Flushing and writing the progress
inside the loop held every record that arrived meanwhile (commits of 5-14 ms median and up to 900 ms at 5,000
records/s on the benchmark's 2 cores), so the loop seals each interval and copies on; the intervals whose
records were all acknowledged get their progress written in order, one progress transaction at a time, by the
fence producer in a thread of their own (the client releases the GIL while it waits). Progress still never
covers a record that was not acknowledged."""
from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for

from confluent_kafka import KafkaException

from ..progress import ProgressRecord
from .groupreport import GroupReport
from .ledger import Ledger
from .shares import Interval, PartitionKey, merged
from .targetwriter import TargetWriter


class IntervalCommitter:
    """Makes the writer's intervals durable with their progress, counted in the ledger."""

    def __init__(self, writer: TargetWriter, ledger: Ledger) -> None:
        self.writer, self.ledger = writer, ledger
        # pipelined commits (at-least-once): intervals ended, waiting for their acks, in order (when each ended,
        # its shares); and the one progress commit running in `_thread`'s thread (future, records, shares, when)
        self._sealed: list[tuple[float, Interval]] = []
        self._inflight: tuple[Future, list[ProgressRecord], Interval, float] | None = None
        self._thread: ThreadPoolExecutor | None = None
        self.report = GroupReport.of(ledger.ctx)  # the position reported to a source group (opt-in)
        writer.before_fatal = self.wait_inflight
        writer.open_keys = self._sealed_keys

    def take(self, kept: IntervalCommitter) -> None:
        """The progress thread of the lane's previous copier (drained), not one per epoch."""
        self._thread, kept._thread = kept._thread, None
        self.report, kept.report = kept.report, None

    @property
    def busy(self) -> bool:
        """Sealed intervals or a progress commit wait (at-least-once)."""
        return bool(self._sealed) or self._inflight is not None

    def _sealed_keys(self) -> Iterator[PartitionKey]:
        return (k for _, shares in self._sealed for k in shares)

    def end_interval(self, ended: float) -> str:
        """The open interval ended at `ended` (either copy path's loop): exactly-once commits it now, at-least-once
        seals it for the pipeline, an empty one just closes the protocol's transaction. Returns what the loop's
        pause accounting calls that step."""
        writer = self.writer
        assert writer.protocol is not None
        if not writer.interval:
            writer.protocol.end_empty()
            return "commit"
        if writer.protocol.pipelined:
            self.seal(ended)
            return "pipeline"
        self.commit_now()
        return "commit"

    # ---- exactly-once: in the loop ---------------------------------------------------------------------------

    def commit_now(self) -> None:
        """Wait for the open interval's acks, then have the protocol commit it with its progress."""
        writer = self.writer
        assert writer.protocol is not None
        t0 = time.monotonic()
        while writer.protocol.producer.flush(30) > 0:
            pass
        self.ledger.acks_ms.append((time.monotonic() - t0) * 1000)
        writer.check_delivery()
        recs = self.ledger.progress_records(writer.interval)
        try:
            writer.protocol.commit(recs, writer.on_progress_delivery)
        except KafkaException as e:
            writer.commit_failed(e, recs)
        writer.check_delivery()
        self.ledger.committed(recs, writer.take_interval(), t0)
        self._reported(recs)

    # ---- at-least-once: pipelined --------------------------------------------------------------------------

    def seal(self, ended: float) -> None:
        """The open interval ended at `ended`: its progress follows once its records are acknowledged."""
        self._sealed.append((ended, self.writer.take_interval()))
        self.advance()

    def advance(self, block: bool = False) -> None:
        """Count the running progress commit when it is done (or wait for it: `block`); then start the next
        for the sealed intervals whose records are all acknowledged."""
        writer = self.writer
        if writer.errors:
            writer.check_delivery()
        if self._inflight is not None:
            fut, recs, interval, t0 = self._inflight
            if not fut.done() and not block:
                return
            self._inflight = None
            try:
                fut.result()
            except KafkaException as e:
                writer.commit_failed(e, recs)
            writer.check_delivery()
            self.ledger.committed(recs, interval, t0)
            self._reported(recs)
        ready = 0
        while ready < len(self._sealed) and all(p.acknowledged for p in self._sealed[ready][1].values()):
            ready += 1
        if not ready:
            return
        intervals, self._sealed = self._sealed[:ready], self._sealed[ready:]
        interval = merged([shares for _, shares in intervals])
        assert writer.protocol is not None
        recs = self.ledger.progress_records(interval)
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"progress-{self.ledger.ctx.lane}")
        self._inflight = (self._thread.submit(writer.protocol.commit, recs, writer.on_progress_delivery), recs,
                          interval, intervals[0][0])

    def drain(self) -> None:
        """The epoch ends: every sealed interval's records acknowledged and its progress committed."""
        assert self.writer.protocol is not None
        while self.busy:
            if self._sealed and not all(p.acknowledged for p in self._sealed[0][1].values()):
                self.writer.protocol.producer.flush(30)
            self.advance(block=True)

    def _reported(self, recs: list[ProgressRecord]) -> None:
        if self.report is not None:
            self.report.committed(recs)

    def report_now(self) -> None:
        """The epoch ends: the source group gets the last committed offsets (commits are sent once a second)."""
        if self.report is not None:
            self.report.send()

    # ---- giving up -----------------------------------------------------------------------------------------

    def wait_inflight(self) -> None:
        if self._inflight is not None:
            wait_for([self._inflight[0]])

    def drop_uncommitted(self) -> None:
        """Forget what was copied but not committed (the lane gives it up, and a fresh start copies it again);
        a progress commit that was running is waited for, and counted when it went through."""
        self.writer.interval.clear()
        self._sealed.clear()
        if self._inflight is not None:
            fut, recs, interval, t0 = self._inflight
            self._inflight = None
            wait_for([fut])
            if fut.exception() is None:
                self.ledger.committed(recs, interval, t0)
                self._reported(recs)

    def shutdown(self) -> None:
        """No progress commit outlives the clients (it uses the fence producer)."""
        self.drop_uncommitted()
        if self.report is not None:
            self.report.close()
            self.report = None
        if self._thread is not None:
            self._thread.shutdown()
            self._thread = None
