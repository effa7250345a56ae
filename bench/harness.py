"""One benchmark run of one contender: fresh target cluster, start, wait until mirrored, measure, check, clean.

The throughput run and `wait_mirrored` (shared by every kind of run); the latency run is `latency.py`, the
machine's ceiling `ceiling.py`, what they share `runenv.py`.
"""
from __future__ import annotations

import os
import time

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from . import data
from .contenders import BenchError, Contender, MirrorSetup, remote_name, rmtree
from .procmon import ProcessTreeMonitor
from .runenv import Env, MachineSampler, RunResult


def _windowed(run: RunResult, mon: ProcessTreeMonitor, bmon: ProcessTreeMonitor, t_start: float,
              t_first: float, t_done: float, busy: list[tuple[float, float]], self_cpu: list[tuple[float, float]]) -> None:
    run.startup_s = t_first - t_start
    run.copy_s = max(t_done - t_first, 1e-3)
    run.wall_s = t_done - t_start
    run.cpu_s = mon.cpu_at(t_done) - mon.cpu_at(t_first)
    run.cpu_total_s = mon.cpu_at(t_done)
    run.peak_rss = mon.peak_rss
    run.broker_cpu_s = bmon.cpu_at(t_done) - bmon.cpu_at(t_first)

    def at(series: list[tuple[float, float]], t: float) -> float:
        v = series[0][1] if series else 0.0
        for ts, val in series:
            if ts <= t:
                v = val
        return v

    run.machine_cpu_s = at(busy, t_done) - at(busy, t_first)
    mine = at(self_cpu, t_done) - at(self_cpu, t_first)
    run.foreign_cpu_s = max(0.0, run.machine_cpu_s - run.cpu_s - run.broker_cpu_s - mine)


def wait_mirrored(target: str, expected: dict[tuple[str, int], int], contender: Contender, *,
                  scan, timeout: float, settle: float = 2.0, poll: float = 0.1, on_first=None):  # noqa: ANN001
    """Until the target holds every record: returns (t_first, t_done, scan result, problems).

    Watches the read-committed end offsets of the target partitions; once every one reaches the source's
    count and none has moved for `settle` seconds, scans the target. t_done is when the offsets last moved.
    A poll that misses some partitions (at 10,000 partitions on a loaded machine some answers time out) keeps
    their last offsets: only an offset that moved counts as a change, or the run would never settle.
    """
    admin, admin_at = AdminClient({"bootstrap.servers": target, "log_level": 2}), time.time()
    tps = [TopicPartition(t, p) for t, p in expected]
    t_first = None
    t_change = time.time()
    known: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + timeout
    settle_now = settle
    problems: list[str] = []
    res = None
    while time.monotonic() < deadline:
        contender.check()
        try:
            offs = data.end_offsets(admin, tps)
        except Exception:  # noqa: BLE001
            offs = {}
        now = time.time()
        if len(offs) < len(tps) and now - admin_at >= 5.0:
            # a client that asked before the mirror created the topics kept failing for some of them (the
            # scale run at 10,000 partitions waited out its time-out with every record on the target)
            admin, admin_at = AdminClient({"bootstrap.servers": target, "log_level": 2}), now
        moved = {k: v for k, v in offs.items() if known.get(k) != v}
        if moved:
            known.update(moved)
            t_change = now
        if t_first is None and any(v > 0 for v in known.values()):
            t_first = now
            if on_first is not None:
                on_first()
        if t_first is not None and now - t_change >= settle_now and \
                all(known.get(k, 0) >= v for k, v in expected.items()):
            res, problems = scan()
            if not problems:
                return t_first, t_change, res, []
            settle_now = min(settle_now * 2, 30.0)
            problems = [f"after settling: {p}" for p in problems]
        time.sleep(poll)
    if not problems:
        short = [k for k, v in expected.items() if known.get(k, 0) < v]
        problems = (["timed out before any record reached the target"] if t_first is None else
                    [f"timed out with {len(short)} of {len(expected)} target partitions short of the source's "
                     f"count (first: {short[0][0]}/{short[0][1]} at {known.get(short[0], 0)} of "
                     f"{expected[short[0]]})"] if short else
                    ["timed out: the target's end offsets never stayed put for the settle window"])
    return t_first, t_change, res, problems


def run_mirror_throughput(env: Env, contender: Contender, layout: data.Layout, source_scan: data.ScanResult,
                          rep: int, parallelism: int, timeout: float, settle: float,
                          profile: bool = False) -> RunResult:
    """One measured copy of `layout`'s topics (one record size, so a run's figures are for that size) out of
    the preloaded source; with `profile`, an extra run under py-spy (kind "profile", left out of the medians
    because sampling slows the mirror down)."""
    run = RunResult(contender.name, "profile" if profile else "throughput", rep, size=layout.size_name,
                    records=layout.total_records, bytes=layout.payload_bytes)
    source_scan = source_scan.only({t.name for t in layout.topics})
    target = env.new_target()
    rundir = env.work / "runs" / f"{contender.name}-tp-{rep}-{layout.label}"
    rmtree(rundir)
    setup = MirrorSetup(env.source.bootstrap, target.bootstrap, layout.pattern, parallelism, rundir)
    rename = {t.name: remote_name(t.name) for t in layout.topics}
    specs = {remote_name(t.name): t for t in layout.topics}
    expected = {(remote_name(t.name), p): (t.records + t.partitions - 1 - p) // t.partitions
                for t in layout.topics for p in range(t.partitions)}

    def scan():  # noqa: ANN202
        r = data.scan(target.bootstrap, specs)
        return r, data.compare(source_scan, r, rename, contender.exactly_once)

    bmon = ProcessTreeMonitor([env.source.pid, target.pid]).start()
    mon = None
    try:
        with MachineSampler() as ms:
            t_start = time.time()
            pid = contender.start(setup)
            mon = ProcessTreeMonitor([pid]).start()
            spies = []

            def start_spy() -> None:  # from the first copied record on: the copy, not the start-up
                if profile:
                    from .profile import PySpy

                    spies.append(PySpy(pid, rundir / "py-spy.txt"))
            try:
                t_first, t_done, res, problems = wait_mirrored(target.bootstrap, expected, contender, scan=scan,
                                                               timeout=timeout, settle=settle, on_first=start_spy)
            finally:
                for spy in spies:
                    spy.stop()
            spy = spies[0] if spies else None
            mon.stop()
            bmon.stop()
            run.detail["cpu_by_kind"] = mon.cpu_by_kind()
            if t_first is not None:
                run.detail["copy_cpu_by_kind"] = mon.kinds_between(t_first, t_done)
            if spy is not None:
                from .profile import summarize

                run.detail["profile"] = summarize(rundir / "py-spy.txt")
                run.detail["profile_file"] = str(rundir / "py-spy.txt")
        run.log = str(contender.log)
        if t_first is not None:
            _windowed(run, mon, bmon, t_start, t_first, t_done, ms.busy, ms.mine)
        run.problems = problems
        run.ok = not problems
        if res is not None:
            run.dups = res.dups
            run.detail["verify_scan_s"] = round(res.seconds, 2)
    except BenchError as e:
        run.problems = [str(e)]
    finally:
        contender.stop()
        if mon is not None:
            mon.stop()
        bmon.stop()
        env.drop_target(target, keep_logs=not run.ok)
    return run


def pid_of_self() -> int:
    return os.getpid()
