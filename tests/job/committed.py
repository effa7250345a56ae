"""How far a mirror's copying got, sampled while something is done to its clusters: the remote topic's committed end
(read_committed end offsets, summed), which grows exactly when a lane commits; how long copying stood still.
Shared by the rotation tests (credentials, certificates)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec


def wait_committed(bootstrap: str, topic: str, at_least: int, alive: Callable[[], bool], timeout: float, what: str,
                   partitions: int = 3) -> None:
    """Wait until the remote topic's committed end reaches `at_least`, or the job ends (the caller then asserts it
    is alive with its log), or `timeout` passes (an AssertionError naming `what`)."""
    deadline = time.monotonic() + timeout
    while committed_end(bootstrap, topic, partitions) < at_least and alive():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def committed_end(bootstrap: str, topic: str, partitions: int = 3) -> int:
    """The remote topic's read_committed end offsets, summed: grows exactly when a lane commits."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        res = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
                                 isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=10)
        return sum(f.result(10).offset for f in res.values())
    except Exception:  # noqa: BLE001 - not created yet
        return 0


class Progress:
    """Samples the committed end every second; says when copying moved after a moment and the longest still."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.samples: list[tuple[float, int]] = []

    def sample_for(self, seconds: float, alive: Callable[[], bool]) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            assert alive(), "the job ended"
            self.samples.append((time.monotonic(), committed_end(self.bootstrap, self.topic)))
            time.sleep(1.0)

    def sample_until_moved(self, t: float, seconds: float, alive: Callable[[], bool], then: float = 5.0) -> None:
        """Sample until the committed end grew past what it was at `t`, and `then` seconds more; `seconds` at
        most (a copy that never resumes is the caller's to judge with `moved_after`)."""
        until = time.monotonic() + seconds
        while time.monotonic() < until and self.moved_after(t) is None:
            self.sample_for(1.0, alive)
        self.sample_for(min(then, max(0.0, until - time.monotonic())), alive)

    @contextmanager
    def sampling(self) -> Iterator[None]:
        """Sample every second in a thread while the block runs, so time the test spends doing something else
        (a CLI's JVM starting) is sampled too, not counted as one long still."""
        stop = threading.Event()

        def run() -> None:
            while not stop.is_set():
                self.samples.append((time.monotonic(), committed_end(self.bootstrap, self.topic)))
                stop.wait(1.0)

        thread = threading.Thread(target=run, name="progress-sampler", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(30)

    def moved_after(self, t: float) -> float | None:
        """Seconds from `t` until the committed end first grew past what it was at `t`."""
        at = [n for s, n in self.samples if s <= t]
        base = at[-1] if at else 0
        return next((s - t for s, n in self.samples if s > t and n > base), None)

    def longest_still(self, since: float) -> float:
        """The longest time the committed end did not grow, from `since` on."""
        pts = [(s, n) for s, n in self.samples if s >= since]
        longest, last_change = 0.0, pts[0][0] if pts else since
        for (s0, n0), (s1, n1) in zip(pts, pts[1:]):
            if n1 > n0:
                longest, last_change = max(longest, s1 - last_change), s1
        if pts:
            longest = max(longest, pts[-1][0] - last_change)
        return longest
