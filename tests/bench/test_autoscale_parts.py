"""bench.autoscale's pure parts: core seconds, the drain, the figures over the load only, the bounds, the results
document and its table; the resource both modes run validated by the real model; the lanes' per-record cost
timed; the picture drawn when matplotlib is installed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import autoscale, autoscaleparts
from bench.autoscaleparts import Point

REPO = Path(__file__).resolve().parents[2]


def _p(t: float, lag: int | None, lanes: int | None = 1, cores: int = 1, rate: float | None = 600.0,
       decided: int | None = None) -> Point:
    return Point(t, lag, rate, lanes, cores, cores, decided, None)


def test_core_seconds_hold_each_refreshs_cores_until_the_next() -> None:
    points = [_p(0, 10, cores=1), _p(10, 10, cores=2), _p(15, 10, cores=4), _p(25, 10, cores=1)]
    assert autoscaleparts.core_seconds(points) == 1 * 10 + 2 * 5 + 4 * 10
    assert autoscaleparts.core_seconds(points[:1]) == 0


def test_drain_counts_from_the_burst_start_to_the_lag_back_at_the_warm_ups() -> None:
    # warm-up 0..60 (second half's largest lag 900), burst 60..90; the lag is back at 900 or less at t=130
    points = [_p(0, 5000), _p(20, 3000), _p(30, 700), _p(50, 900), _p(65, 4000), _p(80, 20000), _p(95, 15000),
              _p(110, 2000), _p(130, 800), _p(140, 0)]
    assert autoscaleparts.baseline_lag(points, 60) == 900
    assert autoscaleparts.drain_seconds(points, 60, 90, 900) == 70
    # a lag below the baseline during the burst is not the drain: only from the burst's end
    assert autoscaleparts.drain_seconds([_p(70, 10), _p(100, 5000)], 60, 90, 900) is None


def test_summary_judges_the_load_only_and_keeps_the_catch_up_in_the_series() -> None:
    points = [_p(0, 100), _p(40, 100), _p(60, 9000, lanes=1), _p(80, 30000, lanes=3, cores=3, decided=3),
              _p(100, 50), _p(120, 40, lanes=1, decided=1), _p(150, 99999, lanes=1)]  # t=150: after the load
    s = autoscaleparts.summary(points, 50, 70, 120, lost=0, duplicated=0, records=1234)
    assert s["drain_s"] == 50 and s["drain_after_burst_s"] == 30
    assert s["max_lag"] == 30000 and s["lanes_min"] == 1 and s["lanes_max"] == 3
    assert s["core_s"] == 1 * 80 + 3 * 20 + 1 * 20  # to t=120; the catch-up's 30 s are not counted
    assert s["produced_per_s"] == {"warmup": None, "burst": None, "after": None}  # no end offsets read here
    assert s["refreshes"] == 6 and len(s["series"]) == 7 and s["series"][3]["decided"] == 3
    assert s["series"][0]["lag_s"] == pytest.approx(100 / 600)
    assert autoscaleparts.within_bounds(s, 1, 3) and not autoscaleparts.within_bounds(s, 1, 2)
    never = autoscaleparts.summary(points[:4], 50, 70, 120, 0, 0, 0)
    assert never["drain_s"] is None and never["drain_after_burst_s"] is None


def test_the_load_each_phase_really_had() -> None:
    points = [Point(t, 0, 1.0, 1, 1, 1, None, produced) for t, produced in
              ((0, 1000), (10, 7000), (20, 13000), (30, 37000), (40, 61000), (50, 67000), (60, 73000))]
    assert autoscaleparts.phase_rates(points, 20, 40, 60) == {"warmup": 600.0, "burst": 2400.0, "after": 600.0}
    assert autoscaleparts.phase_rates(points[:2], 20, 40, 60) == {"warmup": 600.0, "burst": None, "after": None}


def test_lag_seconds_as_the_autoscaler_reads_them() -> None:
    assert _p(0, 1200, rate=600).lag_s == 2
    assert _p(0, 0, rate=0).lag_s == 0 and _p(0, 5, rate=0).lag_s is None and _p(0, None).lag_s is None


def _args(*extra: str):
    return autoscale.parse(["--results", "/nonexistent", *extra])


def test_both_modes_resources_pass_the_real_model() -> None:
    from sparkmirror.resource.model import KafkaMirrorMaker2

    args = _args("--max-lanes", "3")
    for mode in ("on", "off"):
        body = autoscale.resource(mode, "ns", "127.0.0.1:1", "127.0.0.1:2", "t", args)
        kmm2 = KafkaMirrorMaker2.model_validate(body)
        assert kmm2.spec.spark.parallelism == 1 and kmm2.spec.spark.executor.instances == 1
        assert kmm2.spec.mirrors[0].transforms[0].callable == "bench.lanecost:pace"
        if mode == "on":
            a = kmm2.spec.autoscaling
            assert (a.minLanes, a.maxLanes, a.maxExecutors, a.targetLagSeconds) == (1, 3, 3, 30.0)
        else:
            assert kmm2.spec.autoscaling is None
    assert "transforms" not in autoscale.resource("off", "ns", "a", "b", "t", _args("--record-cost-us", "0")
                                                  )["spec"]["mirrors"][0]


def test_bad_arguments_are_refused_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, word in ((["--modes", "sideways"], "--modes"), (["--min-lanes", "5", "--max-lanes", "2"],
                                                              "--min-lanes")):
        with pytest.raises(SystemExit) as e:
            autoscale.parse(argv)
        assert e.value.code == 2 and word in capsys.readouterr().err


def _doc() -> dict:
    points = [_p(0, 100), _p(40, 100), _p(60, 9000), _p(80, 30000, lanes=3, cores=3, decided=3), _p(100, 50)]
    args = _args()
    config = {"rate_records": 600, "burst_factor": 4.0, "partitions": 4, "warmup_s": 50.0, "burst_s": 20.0,
              "after_s": 50.0, "record_cost_us": 800.0, "off_lanes": 1, "autoscaling": autoscale.autoscaling_spec(args),
              "machine": {"cpus": 2, "loadavg_start": [3.2, 2.0, 1.0], "loadavg_end": [4.5, 3.0, 2.0]}}
    modes = {"on": autoscaleparts.summary(points, 50, 70, 120, 0, 0, 4800),
             "off": autoscaleparts.summary([_p(t, 100 + 100 * t) for t in range(0, 120, 10)], 50, 70, 120, 0, 0, 4800)}
    return autoscaleparts.document(modes, config, {"sha": "abc123", "dirty": False}, "2026-11-29T11:00:00Z")


def test_the_document_and_its_table() -> None:
    doc = json.loads(json.dumps(_doc()))  # what the file holds
    assert set(doc["modes"]) == {"on", "off"} and doc["commit"]["sha"] == "abc123"
    for mode in doc["modes"].values():
        assert {"drain_s", "core_s", "lost", "duplicated", "series"} <= set(mode)
    md = autoscaleparts.markdown(doc, "autoscale.png")
    assert "| on | 50 | 30 | 140 | 1..3 | 30,000 | 50 |" in md
    assert "| off | never | never |" in md and "![lag and lanes](autoscale.png)" in md
    assert "800 us" in md and "2 CPUs, load average 3.2 at the start, 4.5 at the end" in md
    failed = autoscaleparts.document({}, doc["config"], doc["commit"], doc["finished"], {"on": "TimeoutError: a|b"})
    assert "| on | failed: TimeoutError: a/b |" in autoscaleparts.markdown(failed, "autoscale.png")


def test_the_picture(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from bench.autoscaleplot import plot

    out = plot(_doc(), tmp_path / "autoscale.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_a_record_costs_its_lane_the_time_set() -> None:
    # a fresh interpreter: the cost is read once, when the lanes' worker imports the module
    code = ("import time; from bench.lanecost import pace; r = object(); t = time.monotonic()\n"
            "assert all(pace(r) is r for _ in range(200)); print(time.monotonic() - t)")
    env = {**os.environ, "SPARKMIRROR_BENCH_RECORD_COST_US": "500", "PYTHONPATH": str(REPO)}
    took = float(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                check=True, cwd=REPO).stdout)
    assert 0.09 <= took < 1.0, took  # 200 x 500 us = 0.1 s, slept in 10 ms slices (a loaded machine oversleeps)
    start = time.monotonic()
    free = subprocess.run([sys.executable, "-c", code], env={**env, "SPARKMIRROR_BENCH_RECORD_COST_US": "0"},
                          capture_output=True, text=True, check=True, cwd=REPO).stdout
    assert float(free) < 0.09 and time.monotonic() - start < 60  # no cost: no sleep at all
