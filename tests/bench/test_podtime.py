"""The kind bench's pod-seconds per change (bench/podtime.py): counted above the mirror's count before the change."""
from __future__ import annotations

import time

from bench.podtime import PodSample, PodSampler, count_running, extra_pod_seconds


def _pod(role: str, phase: str = "Running") -> dict:
    return {"metadata": {"labels": {"spark-role": role}}, "status": {"phase": phase}}


def test_running_pods_are_counted_per_role() -> None:
    pods = [_pod("driver"), _pod("executor"), _pod("executor"), _pod("executor", "Pending"),
            _pod("driver", "Succeeded")]
    assert count_running(pods) == {"driver": 1, "executor": 2}


def test_a_handoff_costs_the_second_generations_pods_until_the_first_leaves() -> None:
    steady = {"driver": 1, "executor": 1}
    both = {"driver": 2, "executor": 2}
    samples = [PodSample(0, steady), PodSample(10_000, steady), PodSample(12_000, {"driver": 2, "executor": 1}),
               PodSample(14_000, both), PodSample(44_000, steady), PodSample(60_000, steady)]
    # the change at 11 s: the new driver 12-44 s (32 s), its executor 14-44 s (30 s); nothing before 11 s counts
    assert extra_pod_seconds(samples, 11_000, 70_000) == {"driver": 32.0, "executor": 30.0}
    # a window that ends mid-overlap stops there
    assert extra_pod_seconds(samples, 11_000, 24_000) == {"driver": 12.0, "executor": 10.0}
    # fewer pods than before (a restart's deleted driver) cost nothing extra
    assert extra_pod_seconds([PodSample(0, steady), PodSample(1_000, {"executor": 1})], 500, 9_000) == {}


def test_the_sampler_counts_a_failed_listing_and_goes_on() -> None:
    calls = iter([RuntimeError("apiserver away"), [_pod("driver")]])

    def list_pods() -> list[dict]:
        got = next(calls, [_pod("driver")])
        if isinstance(got, Exception):
            raise got
        return got

    sampler = PodSampler(list_pods, interval=0.01).start()
    deadline = time.monotonic() + 5
    while len(sampler.samples) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert sampler.errors == 1 and sampler.samples[0].running == {"driver": 1}
