"""The machine's ceiling: Kafka's own perf tools read the source and write the target, the bound no mirror beats."""
from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

from sparkmirror_dev import install
from sparkmirror_dev.kafka import java_cmd
from sparkmirror_dev.procs import log_tail, spawn, stop_pid

from . import data
from .contenders import BenchError, rmtree
from .procmon import ProcessTreeMonitor
from .runenv import Env, RunResult


def _java(main: str, *args: str, log: Path) -> subprocess.Popen:
    return spawn(java_cmd(install.kafka(), main, *args, heap="1g"), log)


def run_ceiling(env: Env, layout: data.Layout, rep: int, timeout: float) -> RunResult:
    """The machine's ceiling for `layout`'s topics with Kafka's own Java perf tools: a read phase (one
    ConsumerPerformance per source topic, all at once) then a write phase (one ProducerPerformance per topic, same count and size,
    into a topic with as many partitions on the target, all at once). Each phase's time is its slowest tool's
    own elapsed time (JVM start-up excluded); ceiling = records / the slower phase. An upper bound: a mirror
    reads and writes at the same time on the same cores."""
    run = RunResult("ceiling", "ceiling", rep, size=layout.size_name, records=layout.total_records,
                    bytes=layout.payload_bytes)
    target = env.new_target()
    rundir = env.work / "runs" / f"ceiling-{rep}-{layout.label}"
    rmtree(rundir)
    rundir.mkdir(parents=True)
    data.create_topics(target.bootstrap, [(f"ceil.{t.name}", t.partitions) for t in layout.topics])
    cpu = 0.0
    peak = 0
    phases: dict[str, float] = {}
    try:
        for phase in ("read", "write"):
            procs: list[tuple[subprocess.Popen, Path]] = []
            for t in layout.topics:
                if phase == "read":
                    log = rundir / f"consumer-{t.name}.log"
                    procs.append((_java("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server",
                                        env.source.bootstrap, "--topic", t.name, "--messages", str(t.records),
                                        "--group", f"bench-ceiling-{uuid.uuid4().hex[:8]}", "--timeout", "60000",
                                        "--hide-header", log=log), log))
                else:
                    log = rundir / f"producer-{t.name}.log"
                    procs.append((_java("org.apache.kafka.tools.ProducerPerformance", "--topic", f"ceil.{t.name}",
                                        "--num-records", str(t.records), "--record-size", str(t.value_size),
                                        "--throughput", "-1", "--producer-props",
                                        f"bootstrap.servers={target.bootstrap}", "acks=all", "linger.ms=10",
                                        "batch.size=524288", f"compression.type={t.compression}", log=log), log))
            mon = ProcessTreeMonitor([p.pid for p, _ in procs]).start()
            try:
                for p, _ in procs:
                    p.wait(timeout=timeout)
            finally:
                mon.stop()
                for p, _ in procs:
                    if p.poll() is None:
                        stop_pid(p.pid)
            bad = [(p.returncode, log) for p, log in procs if p.returncode]
            if bad:
                raise BenchError(f"perf tools failed ({phase}): " + "; ".join(
                    f"exit {rc}: {log_tail(log, 10)}" for rc, log in bad))
            parse = _consumer_seconds if phase == "read" else _producer_seconds
            phases[phase] = max(parse(log.read_text()) for _, log in procs)
            cpu += mon.cpu_total
            peak = max(peak, mon.peak_rss)
        run.copy_s = max(phases.values())
        run.wall_s = run.copy_s
        run.cpu_s = cpu
        run.cpu_total_s = cpu
        run.peak_rss = peak
        run.detail = {"read_s": round(phases["read"], 3), "write_s": round(phases["write"], 3),
                      "read_records_per_s": layout.total_records / phases["read"],
                      "write_records_per_s": layout.total_records / phases["write"],
                      "note": "CPU includes the JVMs' start-up; ProducerPerformance writes random values "
                              "without keys or headers"}
        run.ok = True
    except BenchError as e:
        run.problems = [str(e)]
    finally:
        env.drop_target(target, keep_logs=not run.ok)
    return run


def _consumer_seconds(text: str) -> float:
    """ConsumerPerformance CSV: start.time, end.time, MB, MB.sec, nMsg, nMsg.sec, rebalance.ms, fetch.ms, ..."""
    for line in reversed(text.splitlines()):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 8:
            try:
                return float(parts[7]) / 1000.0
            except ValueError:
                continue
    raise BenchError(f"cannot parse ConsumerPerformance output:\n{text[-1500:]}")


def _producer_seconds(text: str) -> float:
    """ProducerPerformance's last line: 'N records sent, X records/sec (Y MB/sec), ...'."""
    for line in reversed(text.splitlines()):
        m = re.match(r"\s*(\d+) records sent, ([\d.]+) records/sec", line)
        if m and float(m.group(2)) > 0:
            return int(m.group(1)) / float(m.group(2))
    raise BenchError(f"cannot parse ProducerPerformance output:\n{text[-1500:]}")
