"""The pure parts of `python -m bench.autoscale`: what a run's status refreshes add up to, and its results.

A run's clock: t = 0 when the warm-up starts (the mirror copying at the steady rate R), the burst (4R) runs
over [burst_start, burst_end), then R again. Definitions the figures keep to:

- `drain_s`: from the burst's start to the first refresh at or after the burst's end whose lag is back at the
  baseline, the lag a mirror keeping up with R carries between its commits (the largest lag of the warm-up's
  second half; "lag 0" under a load that never stops). `drain_after_burst_s` is the part after the burst's end.
  None: the lag never came back within the run.
- `core_s`: executor cores held over time (instances x cores of every application whose driver runs: during a
  handoff both generations), integrated as a step function from one refresh to the next, over the load
  (warm-up, burst, after: the same span in both modes; the catch-up once the load stopped is left out).
- `lost`, `duplicated`: sequence numbers per partition missing or seen twice on the target (read_committed).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Point:
    """One status refresh as the bench saw it."""

    t: float  # seconds since the warm-up began
    lag: int | None  # records on the source not yet committed on the target (status.flowGroups[].lag)
    rate: float | None  # records/s committed (status.flowGroups[].recordsPerSecond)
    lanes: int | None  # lanes per mirror of the generation that copies (None: none copies yet)
    executors: int  # executors of every application whose driver runs
    cores: int  # executor cores they hold (instances x cores)
    decided: int | None = None  # lanes status.autoscaling decided (None: scaling off)
    produced: int | None = None  # records on the source so far

    @property
    def lag_s(self) -> float | None:
        """Lag in seconds at the copy rate, as the autoscaler reads it; None when there is no rate to divide by."""
        if self.lag is None or self.rate is None:
            return None
        if self.rate <= 0:
            return 0.0 if self.lag == 0 else None
        return self.lag / self.rate


def core_seconds(points: Sequence[Point]) -> float:
    """Executor cores held, integrated over time: each refresh's cores until the next one."""
    return sum(a.cores * (b.t - a.t) for a, b in zip(points, points[1:]) if b.t > a.t)


def baseline_lag(points: Sequence[Point], burst_start: float) -> int:
    """The lag a mirror keeping up with the steady rate carries: the largest of the warm-up's second half."""
    lags = [p.lag for p in points if burst_start / 2 <= p.t < burst_start and p.lag is not None]
    return max(lags) if lags else 0


def drain_seconds(points: Sequence[Point], burst_start: float, burst_end: float, baseline: int) -> float | None:
    """Burst start -> the first refresh at or after the burst's end with the lag at most `baseline`."""
    for p in points:
        if p.t >= burst_end and p.lag is not None and p.lag <= baseline:
            return p.t - burst_start
    return None


def phase_rates(points: Sequence[Point], burst_start: float, burst_end: float, load_end: float
                ) -> dict[str, float | None]:
    """Records/s the source really received in each phase (its end offsets at the refreshes), so the burst's
    factor is measured, not assumed; None where a phase has fewer than two readings."""
    def rate(lo: float, hi: float) -> float | None:
        inside = [p for p in points if lo <= p.t <= hi and p.produced is not None]
        if len(inside) < 2 or inside[-1].t <= inside[0].t:
            return None
        grew = inside[-1].produced - inside[0].produced  # type: ignore[operator]
        return round(grew / (inside[-1].t - inside[0].t), 1)
    return {"warmup": rate(0, burst_start), "burst": rate(burst_start, burst_end), "after": rate(burst_end, load_end)}


def summary(points: Sequence[Point], burst_start: float, burst_end: float, load_end: float, lost: int,
            duplicated: int, records: int) -> dict[str, Any]:
    """One mode's figures (see the module's definitions) over the load, [0, load_end]: the catch-up after the
    load stopped is in the series but in no figure, so both modes are judged over the same time."""
    series = points
    points = [p for p in points if p.t <= load_end]
    baseline = baseline_lag(points, burst_start)
    drain = drain_seconds(points, burst_start, burst_end, baseline)
    lanes = [p.lanes for p in points if p.lanes is not None]
    lags = [p.lag for p in points if p.lag is not None]
    lag_s = [s for s in (p.lag_s for p in points) if s is not None and math.isfinite(s)]
    return {"drain_s": None if drain is None else round(drain, 1),
            "drain_after_burst_s": None if drain is None else round(drain - (burst_end - burst_start), 1),
            "core_s": round(core_seconds(points), 1), "lost": lost, "duplicated": duplicated, "records": records,
            "baseline_lag": baseline, "max_lag": max(lags, default=None),
            "max_lag_s": round(max(lag_s), 1) if lag_s else None,
            "lanes_min": min(lanes, default=None), "lanes_max": max(lanes, default=None),
            "produced_per_s": phase_rates(points, burst_start, burst_end, load_end), "refreshes": len(points),
            "series": [asdict(p) | {"lag_s": p.lag_s} for p in series]}


def within_bounds(mode: dict[str, Any], low: int, high: int) -> bool:
    """Every lane count seen inside [low, high]."""
    return all(low <= p["lanes"] <= high for p in mode["series"] if p.get("lanes") is not None)


def document(modes: dict[str, dict[str, Any]], config: dict[str, Any], commit: dict[str, Any],
             finished: str, failed: dict[str, str] | None = None) -> dict[str, Any]:
    """autoscale.json: each mode's figures, the load and spec they ran under, the commit they ran at, and the
    modes that did not finish, with why."""
    return {"finished": finished, "commit": commit, "config": config, "modes": modes, "failed": failed or {}}


def markdown(doc: dict[str, Any], picture: str) -> str:
    """The table and the picture, for bench/results/autoscale.md."""
    c = doc["config"]
    lines = ["# Lag-driven autoscaling: the same load with scaling on and off", "",
             f"Finished {doc['finished']} at {(doc['commit'].get('sha') or '?')[:12]}"
             f"{' (uncommitted changes)' if doc['commit'].get('dirty') else ''}. The operator on a real "
             "kube-apiserver, each SparkApplication a local Spark driver (master local[executors x cores]), real "
             f"Kafka. Load: {c['rate_records']:,} records/s for {c['warmup_s']:g} s, {c['burst_factor']:g}x for "
             f"{c['burst_s']:g} s, then {c['rate_records']:,}/s for {c['after_s']:g} s; "
             + (f"each record costs its lane {c['record_cost_us']:g} us (a Python transform that sleeps: a "
                "lane's capacity set by the load, not by the 2 cores the brokers share). "
                if c.get("record_cost_us") else "") +
             f"`off`: {c['off_lanes']} lane(s) fixed; `on`: spec.autoscaling {c['autoscaling']}."
             + (f" Machine: {c['machine']['cpus']} CPUs, load average {c['machine']['loadavg_start'][0]} at the "
                f"start, {c['machine']['loadavg_end'][0]} at the end." if c.get("machine") else ""), "",
             "| mode | drain s (burst start -> lag back) | after burst s | core s | lanes | max lag | max lag s | "
             "records | lost | duplicated | produced/s warm-up, burst, after |",
             "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, m in doc["modes"].items():
        def f(v: Any) -> str:
            return "never" if v is None else f"{v:,.0f}"
        produced = m.get("produced_per_s") or {}
        lines.append(f"| {name} | {f(m['drain_s'])} | {f(m['drain_after_burst_s'])} | {f(m['core_s'])} | "
                     f"{m['lanes_min']}..{m['lanes_max']} | {f(m['max_lag'])} | {f(m['max_lag_s'])} | "
                     f"{m['records']:,} | {m['lost']} | {m['duplicated']} | "
                     f"{', '.join('-' if v is None else f'{v:,.0f}' for v in produced.values())} |")
    lines += [f"| {name} | failed: {why.replace('|', '/')} | | | | | | | | | |"
              for name, why in (doc.get("failed") or {}).items()]
    lines += ["", "Drain: from the burst's start to the first status refresh after its end whose lag is back at "
              "the warm-up's (the lag a mirror keeping up carries between commits). Core s: executor cores held "
              "(both generations during a handoff) integrated over the load (the catch-up after it is left out).",
              "", f"![lag and lanes]({picture})"]
    return "\n".join(lines) + "\n"
