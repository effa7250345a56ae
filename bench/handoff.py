"""`python -m bench.handoff`: how long replication pauses when a running mirror changes, handoff against restart.

Same clusters, same steady load, one run, two paths:
- handoff: one driver (`sparkmirror run`'s); every `--every` seconds the flow group's version changes and the
  driver hands it over to a new worker generation (standby lanes waiting for the go mark, takeover, old lanes
  fenced), as `sparkmirror run` does on a changed file and the operator does with one application per generation;
- restart: the job as its own process (`python -m sparkmirror.job --config`, what a SparkApplication runs); every
  `--every` seconds it gets SIGTERM (it drains) and starts again with the new version: what a changed spec did
  before handoffs (the Spark operator resubmits the application).

Pause: the largest gap between records becoming visible on the target (a read_committed consumer tailing the
remote topic) from a change until the next. Every record is checked by its sequence number: lost, duplicated.
The figures go into `bench/results/latest.json` under `handoff` (other keys kept) and `handoff.md` beside it.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror_dev.testing import NumberedProducer, create_topic, numbered_counts, unique_name

from . import handoffresults
from .gitstate import commit
from .arrivals import Arrivals
from .jobproc import start_job, stop_job
from .runenv import Env

HERE = Path(__file__).resolve().parent
PARTITIONS = 4


def _config(kafka_src: str, kafka_tgt: str, topic: str, version: str, lanes: int, epoch: float) -> FlowGroupConfig:
    return FlowGroupConfig.model_validate({
        "name": "bench-handoff", "resource": "bench/handoff",
        "clusters": [{"alias": "src", "bootstrapServers": kafka_src}, {"alias": "tgt", "bootstrapServers": kafka_tgt}],
        "mirrors": [{"name": "src-to-tgt", "source": "src", "target": "tgt", "topics": topic,
                     "emitCheckpoints": False, "emitHeartbeats": False}],
        "lanes": lanes, "epochSeconds": epoch, "progressTopic": unique_name("progress"),
        "worker": {"version": version}})


def _with_version(cfg: FlowGroupConfig, version: str) -> FlowGroupConfig:
    return cfg.model_copy(update={"worker": cfg.worker.model_copy(update={"version": version})})


def _wait_copying(arrivals: Arrivals, n: int = 500, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while len(arrivals.times) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"the mirror did not start copying within {timeout:.0f} s")
        time.sleep(0.5)


def _finish(src: str, tgt: str, topic: str, producer: NumberedProducer, arrivals: Arrivals, changes: list[int],
            timeout: float = 240.0) -> dict:
    sent = producer.stop()
    deadline = time.monotonic() + timeout
    while len(arrivals.times) < sent * PARTITIONS and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(3)  # a duplicate would land after the count was reached
    arrivals.stop()
    lost, dup = numbered_counts(tgt, f"src.{topic}", PARTITIONS, sent)
    pauses = arrivals.pauses_between(changes, int(time.time() * 1000))
    return {"changes": len(changes), "records": sent * PARTITIONS, "lost": lost, "duplicated": dup,
            "pauses_ms": pauses}


def _ground(env: Env, src: str, args: argparse.Namespace, path: str):
    """A fresh target, a topic of its own, the mirror's config, a steady producer and the arrivals' clock."""
    tgt = env.new_target().bootstrap
    topic = create_topic(src, unique_name(path), PARTITIONS)
    cfg = _config(src, tgt, topic, "v1", args.lanes, args.epoch)
    return tgt, topic, cfg, NumberedProducer(src, topic, rate=args.rate, partitions=PARTITIONS), \
        Arrivals(tgt, f"src.{topic}")


def run_handoff(env: Env, src: str, args: argparse.Namespace) -> dict:
    from sparkmirror.runner.local import LocalRun

    tgt, topic, cfg, producer, arrivals = _ground(env, src, args, "handoff")
    run = LocalRun([cfg], checkpoint_root=str(args.work / "handoff-ckpt"))
    producer.start()
    arrivals.start()
    changes: list[int] = []
    handoffs: list[dict] = []
    try:
        run.start()
        _wait_copying(arrivals)
        for i in range(args.upgrades):
            time.sleep(args.every)
            changes.append(int(time.time() * 1000))
            done = run.handoff([_with_version(cfg, f"v{i + 2}")])
            handoffs.append(done[0])
            print(f"  handoff {i + 1}: generation {done[0]['generation']}, taken over in {done[0]['tookOverMs']} ms",
                  flush=True)
        time.sleep(args.every)
        return {**_finish(src, tgt, topic, producer, arrivals, changes), "handoffs": handoffs}
    finally:
        run.stop()


def run_restart(env: Env, src: str, args: argparse.Namespace) -> dict:
    tgt, topic, cfg, producer, arrivals = _ground(env, src, args, "restart")
    work = args.work / "restart"

    def start(c: FlowGroupConfig) -> subprocess.Popen:
        return start_job(c, work, c.worker.version)

    producer.start()
    arrivals.start()
    changes: list[int] = []
    proc = start(cfg)
    try:
        _wait_copying(arrivals)
        for i in range(args.restarts):
            time.sleep(args.every)
            changes.append(int(time.time() * 1000))
            stop_job(proc)
            proc = start(_with_version(cfg, f"v{i + 2}"))
            print(f"  restart {i + 1}: resubmitted", flush=True)
        time.sleep(args.every)
        return _finish(src, tgt, topic, producer, arrivals, changes)
    finally:
        stop_job(proc)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.handoff", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--every", type=float, default=30.0, help="seconds between changes; default %(default)s")
    p.add_argument("--rate", type=int, default=500, help="sequences per second (x4 partitions); default %(default)s")
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--epoch", type=float, default=30.0, help="epochSeconds of the mirror; default %(default)s")
    p.add_argument("--paths", default="handoff,restart")
    p.add_argument("--work", type=Path, default=HERE / "work" / "handoff")
    p.add_argument("--results", type=Path, default=HERE / "results")
    p.add_argument("--on", choices=("local", "kind"), default="local",
                   help="local: in-process handoff against a restarted job process; kind: through the resource on "
                        "the kind ground with the real Spark operator")
    p.add_argument("--upgrades", type=int, default=5, help="version changes handed over; default %(default)s")
    p.add_argument("--restarts", type=int, default=5,
                   help="restarts the old way (local: the job process stopped and started with the next version; "
                        "kind: the copying generation's driver pod deleted); default %(default)s")
    args = p.parse_args(argv)
    if args.on == "kind":
        from .handoffkind import run as run_kind
        kind = run_kind(args)
        handoffresults.write(args.results, "kind", kind, HERE.parent)
        print(json.dumps({k: v for k, v in kind.items() if k not in ("handoffs", "ground")}), flush=True)
        return 0 if kind["lost"] == 0 and kind["duplicated"] == 0 else 1
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    args.work.mkdir(parents=True, exist_ok=True)
    env = Env(args.work)
    at = commit(HERE.parent)  # the code that runs is the code at the start
    out: dict = {"finished": None, "config": {k: v for k, v in vars(args).items() if k not in ("work", "results")}}
    try:
        src = env.start_source().bootstrap
        for path in [s.strip() for s in args.paths.split(",") if s.strip()]:
            n = args.upgrades if path == "handoff" else args.restarts
            print(f"{path}: {n} version changes, one every {args.every:.0f} s, "
                  f"{args.rate * PARTITIONS} records/s", flush=True)
            out[path] = (run_handoff if path == "handoff" else run_restart)(env, src, args)
            print(f"  pauses {out[path]['pauses_ms']} ms, lost {out[path]['lost']}, "
                  f"duplicated {out[path]['duplicated']}", flush=True)
    finally:
        env.stop()
    out["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    summary = {"upgrades": 0, "lost": 0, "duplicated": 0}
    if "handoff" in out:
        h = out["handoff"]
        summary.update(upgrades=h["changes"], pause_ms_max=max(h["pauses_ms"]),
                       pause_ms_median=statistics.median(h["pauses_ms"]), lost=h["lost"], duplicated=h["duplicated"])
    if "restart" in out:
        r = out["restart"]
        summary["restart_pause_ms_median"] = statistics.median(r["pauses_ms"])
        summary["restart_lost"], summary["restart_duplicated"] = r["lost"], r["duplicated"]
    out["summary"] = summary
    write(out, args.results)
    if "handoff" in out:
        handoffresults.write(args.results, "local", {
            "path": "in-process handoff (sparkmirror run's driver) against the job process restarted, local Kafka "
                    "and local Spark",
            **{k: summary.get(k) for k in ("upgrades", "pause_ms_max", "pause_ms_median", "restart_pause_ms_median",
                                           "lost", "duplicated", "restart_lost", "restart_duplicated")},
            "restarts": out.get("restart", {}).get("changes", 0),
            "records": out["handoff"]["records"] + out.get("restart", {}).get("records", 0),
            "pauses_ms": out["handoff"]["pauses_ms"], "restart_pauses_ms": out.get("restart", {}).get("pauses_ms"),
            "handoffs": out["handoff"]["handoffs"], "config": out["config"]}, HERE.parent, at)
    print(json.dumps(summary), flush=True)
    return 0 if summary["lost"] == 0 and summary["duplicated"] == 0 else 1


def write(result: dict, results: Path) -> None:
    """`handoff` in latest.json (the throughput figures beside it stay), and handoff.md."""
    results.mkdir(parents=True, exist_ok=True)
    latest = results / "latest.json"
    doc = json.loads(latest.read_text()) if latest.exists() else {}
    doc["handoff"] = {**result["summary"], "details": {k: v for k, v in result.items() if k != "summary"}}
    latest.write_text(json.dumps(doc, indent=2, default=str))
    s = result["summary"]
    lines = ["# Handoff pause: worker-generation handoff against restart", "",
             f"Finished {result['finished']}; config {result['config']}.", "",
             "| path | changes | pause median (ms) | pause max (ms) | records | lost | duplicated |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for path in ("handoff", "restart"):
        if path in result:
            r = result[path]
            lines.append(f"| {path} | {r['changes']} | {statistics.median(r['pauses_ms']):,.0f} | "
                         f"{max(r['pauses_ms']):,} | {r['records']:,} | {r['lost']} | {r['duplicated']} |")
    if "handoff" in result and "restart" in result and s.get("pause_ms_median"):
        lines += ["", f"Restart pauses {s['restart_pause_ms_median'] / s['pause_ms_median']:.1f}x longer "
                      "(median against median)."]
    (results / "handoff.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
