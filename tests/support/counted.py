"""A counted mirror for the end-to-end tests (not product): numbered records flow into a source topic while the
local runner plays the Spark operator, so every record can be counted on the target afterwards (none missing,
none twice). The set-up and the catch-up that the operator's e2e tests share."""
from __future__ import annotations

import time
from pathlib import Path
from types import TracebackType
from typing import Any

from sparkmirror_dev.testing import NumberedProducer, check_numbered, count_records

from tests.support.spark_runner import LocalSparkRunner
from tests.support.waiting import wait_for


class CountedMirror:
    """`with CountedMirror(...) as counted:` starts the runner and the producer (`rate` sequences/s on every
    partition); `start(body, copied)` creates the resource and waits until the target holds more than `copied`
    records; `stop()` ends the producing (also on the way out of the block, whatever failed); `caught_up()` waits
    for every record sent; `check()` counts them."""

    def __init__(self, kapi: Any, namespace: str, home: Path, source: str, target: str, topic: str,
                 rate: float = 50.0, partitions: int = 3) -> None:
        self.kapi, self.target, self.topic, self.partitions = kapi, target, topic, partitions
        self.remote = f"a.{topic}"
        self.runner = LocalSparkRunner(kapi, namespace, home)
        self.producer = NumberedProducer(source, topic, rate=rate, partitions=partitions)
        self.sent: int | None = None

    def __enter__(self) -> CountedMirror:
        self.runner.__enter__()
        self.producer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.stop()
        finally:
            self.runner.__exit__(kind, error, tb)

    def copied(self) -> int:
        return count_records(self.target, self.remote, 20)

    def start(self, body: dict[str, Any], copied: int, timeout: float) -> None:
        self.kapi.create(body)
        wait_for("copying", lambda: self.copied() > copied, timeout=timeout, interval=2.0)

    def stop(self) -> int:
        """Stop producing (once); the sequences every partition got."""
        if self.sent is None:
            self.sent = self.producer.stop()
        return self.sent

    def caught_up(self, timeout: float) -> None:
        """Every record sent is on the target, and a duplicate had the time to land after the count was reached."""
        sent = self.stop()
        wait_for(f"{self.remote} to catch up", lambda: self.copied() >= self.partitions * sent, timeout=timeout,
                 interval=2.0)
        time.sleep(3)

    def check(self) -> None:
        """Every sequence on every partition, in order, exactly once."""
        assert self.sent is not None, "check() after stop()"
        check_numbered(self.target, self.remote, self.partitions, self.sent)
