"""What a change costs the cluster in pod-seconds: a sampler of one mirror's Spark pods on the kind ground.

A handoff runs the next worker generation beside the one copying until the new one has committed (the old stays
a hot spare until then), so for a while the mirror holds two generations' drivers and executors. The sampler lists
the mirror's Spark pods every `interval` seconds; the cost of a change is the pod-seconds above the count the
mirror held just before it, up to the next change.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class PodSample:
    at_ms: int
    running: dict[str, int]  # Spark role (driver, executor) -> pods Running and not being deleted


def count_running(pods: list[dict]) -> dict[str, int]:
    """Running pods per Spark role; a pod being deleted still holds its node's resources, so it counts."""
    counts: dict[str, int] = {}
    for p in pods:
        if (p.get("status") or {}).get("phase") != "Running":
            continue
        role = (p["metadata"].get("labels") or {}).get("spark-role", "other")
        counts[role] = counts.get(role, 0) + 1
    return counts


def extra_pod_seconds(samples: list[PodSample], start_ms: int, end_ms: int) -> dict[str, float]:
    """Pod-seconds per role above the count of the last sample at or before `start_ms`, over [start, end):
    each sample holds until the next (the sampler's interval bounds the error)."""
    before = [s for s in samples if s.at_ms <= start_ms]
    base = before[-1].running if before else {}
    extra: dict[str, float] = {}
    window = [s for s in samples if start_ms <= s.at_ms < end_ms]
    for s, nxt in zip(window, [*window[1:], None]):
        until = min(nxt.at_ms if nxt else end_ms, end_ms)
        for role, n in s.running.items():
            over = n - base.get(role, 0)
            if over > 0:
                extra[role] = extra.get(role, 0.0) + over * (until - s.at_ms) / 1000
    return {role: round(v, 1) for role, v in sorted(extra.items())}


@dataclass
class PodSampler:
    """Lists pods through `list_pods` (returns the pods' JSON items) every `interval` s in a thread."""
    list_pods: Callable[[], list[dict]]
    interval: float = 2.0
    samples: list[PodSample] = field(default_factory=list)
    errors: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pod-sampler", daemon=True)

    def start(self) -> "PodSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(PodSample(int(time.time() * 1000), count_running(self.list_pods())))
            except Exception:  # noqa: BLE001 - a missed sample widens one step; the run goes on
                self.errors += 1
            self._stop.wait(self.interval)


def kubectl_pods(kubectl: Callable[..., str], namespace: str, selector: str) -> Callable[[], list[dict]]:
    """A `list_pods` for `PodSampler` through the ground's kubectl."""
    return lambda: json.loads(kubectl("-n", namespace, "get", "pods", "-l", selector, "-o", "json"))["items"]
