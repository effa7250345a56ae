"""The soak's verdict without brokers: per kind of process, the RSS trend after the warm-up."""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from bench.procmon import Sample
from bench.soak import MB, rss_trend


def _sample(t: float, jvm_mb: float, worker_mb: float, workers: int = 2) -> Sample:
    rss = {"jvm": int(jvm_mb * MB), "python-worker": int(worker_mb * MB), "other": 0}
    return Sample(t, 0.0, sum(rss.values()), {}, rss, {"jvm": 1, "python-worker": workers})


def test_a_flat_process_and_a_leaking_one_after_the_warmup() -> None:
    # warm-up: both grow; then the JVM stays at 400 MB while the workers leak 1 MB a minute
    samples = [_sample(t, 100 + t, 50 + t) for t in range(0, 300, 10)]
    samples += [_sample(300 + t, 400, 350 + t / 60, workers=2 + t // 600) for t in range(0, 3600, 10)]

    trend = rss_trend(samples, since=300)

    assert set(trend) == {"jvm", "python-worker", "total"}  # a kind that never held memory is left out
    assert trend["jvm"]["growth_mb"] == 0 and trend["jvm"]["slope_mb_per_hour"] == 0
    assert trend["jvm"]["first_mb"] == trend["jvm"]["last_mb"] == trend["jvm"]["peak_mb"] == 400
    assert 59 <= trend["python-worker"]["slope_mb_per_hour"] <= 61
    assert 50 <= trend["python-worker"]["growth_mb"] <= 60  # medians of the first and last tenth
    assert (trend["python-worker"]["processes_min"], trend["python-worker"]["processes_max"]) == (2, 7)
    assert trend["total"]["slope_mb_per_hour"] == trend["python-worker"]["slope_mb_per_hour"]


def test_the_python_driver_is_judged_net_of_the_history_it_holds_by_design() -> None:
    """The driver's offset history grows toward its cap during a default run: `python-driver-net` (RSS minus
    the history held at each sample) is what is judged; a worker leak still fails the run, naming the kind."""
    from bench.soak import verdict

    samples, history = [], []
    for t in range(0, 3600, 10):
        held = int(t / 3600 * 20 * MB)  # 20 MB/h of ranges into the history
        rss = {"python-driver": 150 * MB + held, "python-worker": int((300 + 8 * t / 3600) * MB)}
        samples.append(Sample(t, 0.0, sum(rss.values()), {}, rss, {"python-driver": 1, "python-worker": 2}))
        history.append((t - 1, held))  # taken just before the sample

    trend = rss_trend(samples, since=600, history=history)

    assert 19.5 <= trend["python-driver"]["slope_mb_per_hour"] <= 20.5
    assert 19.5 <= trend["offset-history"]["slope_mb_per_hour"] <= 20.5
    assert abs(trend["python-driver-net"]["slope_mb_per_hour"]) <= 0.2
    assert trend["python-driver-net"]["processes_max"] == 1
    assert verdict(trend, 5.0) == ["soak: FAIL python-worker grows 8.0 MB/h after the warm-up (limit 5 MB/h)"]
    assert verdict(trend, 10.0) == []


def test_the_driver_jvm_is_judged_by_what_it_keeps_not_by_its_heap_filling_toward_xmx() -> None:
    """Heap pages touched for the first time and the code cache grow toward their bounds (-Xmx,
    ReservedCodeCacheSize) and are reported, not judged; the live heap and the rest of the RSS are."""
    from bench.soak import verdict

    samples = [Sample(t, 0.0, 500 * MB, {}, {"jvm": int((450 + 40 * t / 3600) * MB)}, {"jvm": 1})
               for t in range(0, 3600, 10)]
    series = {"jvm-heap": [(t, int((250 + 30 * t / 3600) * MB)) for t in range(0, 3600, 30)],
              "jvm-code": [(t, int((20 + 10 * t / 3600) * MB)) for t in range(0, 3600, 30)],
              "jvm-nonheap": [(t, int((200 + 10 * t / 3600) * MB)) for t in range(0, 3600, 30)],
              "jvm-native": [(t, 180 * MB) for t in range(0, 3600, 30)],
              "jvm-live-heap": [(t, int((60 + 1 * t / 3600) * MB)) for t in range(0, 3600, 180)]}

    trend = rss_trend(samples, since=600, series=series)

    assert 39.5 <= trend["jvm"]["slope_mb_per_hour"] <= 40.5
    assert trend["jvm-live-heap"]["points"] == 16 and trend["jvm-native"]["slope_mb_per_hour"] == 0
    assert verdict(trend, 5.0) == []
    series["jvm-native"] = [(t, int((180 + 6 * t / 3600) * MB)) for t in range(0, 3600, 30)]
    assert verdict(rss_trend(samples, since=600, series=series), 5.0) == [
        "soak: FAIL jvm-native grows 6.0 MB/h after the warm-up (limit 5 MB/h)"]
