"""`python -m bench.autoscale`: lag-driven autoscaling on the real API server with real Kafka and Spark, the same
load with scaling `on` and `off`.

One ground for both modes: etcd + kube-apiserver (dev/sparkmirror_dev/kube.py), two KRaft clusters, the real
operator (kopf, in-process) and the stand-in Spark operator (tests/support/spark_runner.py: each SparkApplication
a local Spark driver, master local[instances x cores]). Each mode gets its own namespace, source topic and
resource; numbered records flow at `--rate` records/s for `--warmup` s once the mirror copies, `--burst-factor`
times that for `--burst` s, then `--rate` again for `--after` s; then the load stops, the mirror catches up and
every sequence number is counted on the target (lost, duplicated).
- `off`: `--off-lanes` lanes (the autoscaling minimum), fixed;
- `on`: spec.autoscaling, `--min-lanes`..`--max-lanes`, executors following the lanes (one lane a core), a
  `--target-lag` s lag target, `--cooldown` and `--scale-down-delay` short enough for the run to show both ways.
Every `--status-interval` s (the operator's refresh) the bench records the lag and rate from the status, the
lanes of the generation that copies, the lanes autoscaling decided and the executors whose drivers run.
`--record-cost-us` gives each record a cost in its lane (bench/lanecost.py, a Python transform that sleeps), so a
lane's capacity is set by the load rather than by the 2 cores everything shares; 0 runs the records as they are.
Definitions of drain_s and core_s: bench/autoscaleparts.py. Writes bench/results/autoscale.{json,md,png}
(`--results`), with the commit the run began at. Exit 1 when a record is lost or duplicated or lanes left bounds.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NAME = "burst"
TRICKLE = 10.0  # sequences/s per partition while the first driver starts


def _environment(args: argparse.Namespace) -> None:
    """What the operator (read at import) and the Spark drivers and lanes (inherited) must see."""
    os.environ["SPARKMIRROR_STATUS_INTERVAL"] = str(args.status_interval)
    os.environ["SPARKMIRROR_BENCH_RECORD_COST_US"] = str(args.record_cost_us)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    paths = [str(ROOT), str(ROOT / "spark-app"), str(ROOT / "operator"), str(ROOT / "dev")]
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p and p not in paths])  # the lanes import bench.lanecost


def autoscaling_spec(args: argparse.Namespace) -> dict[str, Any]:
    return {"enabled": True, "minLanes": args.min_lanes, "maxLanes": args.max_lanes, "minExecutors": 1,
            "maxExecutors": args.max_lanes, "targetLagSeconds": args.target_lag, "cooldownSeconds": args.cooldown,
            "scaleDownDelaySeconds": args.scale_down_delay}


def resource(mode: str, namespace: str, source: str, target: str, topic: str, args: argparse.Namespace) -> dict:
    lanes = args.min_lanes if mode == "on" else args.off_lanes
    mirror: dict[str, Any] = {"source": {"alias": "a", "bootstrapServers": source}, "topicsPattern": topic,
                              "checkpointConnector": {"config": {"emit.checkpoints.enabled": "false"}}}
    if args.record_cost_us > 0:
        mirror["transforms"] = [{"type": "python", "callable": "bench.lanecost:pace"}]
    spec: dict[str, Any] = {"target": {"alias": "b", "bootstrapServers": target}, "mirrors": [mirror],
                            "spark": {"parallelism": lanes, "epochSeconds": args.epoch,
                                      "executor": {"instances": lanes, "cores": 1}},
                            "upgrade": {"readyTimeoutSeconds": 480, "handoffTimeoutSeconds": 60}}
    if mode == "on":
        spec["autoscaling"] = autoscaling_spec(args)
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": NAME, "namespace": namespace}, "spec": spec}


class Sampler(threading.Thread):
    """A Point every `interval` s from the status, the applications and the runner's driver processes."""

    def __init__(self, kapi: Any, namespace: str, runner: Any, source: str, topic: str, partitions: int,
                 interval: float) -> None:
        super().__init__(daemon=True, name="autoscale-sampler")
        self.kapi, self.namespace, self.runner, self.interval = kapi, namespace, runner, interval
        self.source, self.topic, self.partitions = source, topic, partitions
        self.points: list = []
        self.errors: list[str] = []
        self.t0 = time.monotonic()
        self._stop_evt = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.source, "group.id": "autoscale-bench-ends"})
        try:
            while not self._stop_evt.is_set():
                try:
                    self.points.append(self.point(consumer))
                except Exception as e:  # noqa: BLE001 - a refresh missed is a gap in the series, said at the end
                    self.errors.append(repr(e))
                self._stop_evt.wait(self.interval)
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stop_evt.set()
        self.join(30)

    def point(self, consumer: Any):
        from confluent_kafka import TopicPartition

        from sparkmirror.resource.flowgroup import FlowGroupConfig
        from sparkmirror.resource.names import application_name

        from .autoscaleparts import Point

        t = time.monotonic() - self.t0
        status = (self.kapi.get("KafkaMirrorMaker2", self.namespace, NAME) or {}).get("status") or {}
        group = (status.get("flowGroups") or [{}])[0]
        decided = (status.get("autoscaling") or [{}])[0].get("lanes")
        jobs = dict(self.runner.jobs)
        executors = cores = 0
        for app in self.kapi.list("SparkApplication", self.namespace):
            job = jobs.get(app["metadata"]["name"])
            if job is not None and job.proc.poll() is None:
                ex = app["spec"].get("executor") or {}
                executors += int(ex.get("instances", 1))
                cores += int(ex.get("instances", 1)) * int(ex.get("cores", 1))
        lanes = None
        if group.get("workerGeneration") is not None:
            app = application_name(NAME, group.get("name", "a"), group["workerGeneration"])
            config = self.runner.workdir / f"{app}.yaml"  # the runner's copy of the generation's flow group
            if config.exists():
                import yaml

                cfg = FlowGroupConfig.model_validate(yaml.safe_load(config.read_text()))
                lanes = max(cfg.lanes_of(m) for m in cfg.mirrors)
        produced = sum(consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)[1]
                       for p in range(self.partitions))
        return Point(round(t, 2), group.get("lag"), group.get("recordsPerSecond"), lanes, executors, cores,
                     decided, produced)


def run_mode(mode: str, kube: Any, kapi: Any, source: str, target: str, args: argparse.Namespace) -> dict:
    from kubernetes import client

    from sparkmirror_dev.testing import create_topic, numbered_counts, unique_name
    from tests.support.counted import CountedMirror

    from .autoscaleparts import summary

    namespace = unique_name(f"autoscale-{mode}")
    with kube.api_client() as api:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    topic = create_topic(source, unique_name(f"autoscale-{mode}"), args.partitions)
    per_partition = args.rate / args.partitions
    start = time.monotonic()
    # a trickle while the first driver starts (a minute or more on 2 busy cores): the warm-up then begins with the
    # mirror caught up, not with a start-up backlog that scaling `on` would answer before the burst
    with CountedMirror(kapi, namespace, args.work / mode, source, target, topic, rate=TRICKLE,
                       partitions=args.partitions) as counted:
        counted.start(resource(mode, namespace, source, target, topic, args), copied=TRICKLE * args.partitions,
                      timeout=600)
        print(f"  {mode}: copying after {time.monotonic() - start:.0f} s", flush=True)
        sampler = Sampler(kapi, namespace, counted.runner, source, topic, args.partitions, args.status_interval)
        counted.producer.rate = per_partition
        sampler.start()
        caught_up = True
        try:
            _phase(sampler, args.warmup, mode, f"warm-up at {args.rate:,} records/s")
            counted.producer.rate = per_partition * args.burst_factor
            _phase(sampler, args.burst, mode, f"burst {args.burst_factor:g}x")
            counted.producer.rate = per_partition
            _phase(sampler, args.after, mode, "after the burst")
            print(f"  {mode}: load stopped, waiting for the last records", flush=True)
            try:
                counted.caught_up(timeout=args.catch_up)
            except AssertionError as e:  # counted all the same: what is missing shows as lost
                caught_up = False
                print(f"  {mode}: {e}", flush=True)
        finally:
            sampler.stop()
        runner_errors = list(counted.runner.errors)
        events = [{"reason": e.get("reason"), "message": e.get("message"),
                   "time": e.get("lastTimestamp") or e.get("eventTime")}
                  for e in kapi.list("Event", namespace) if e.get("reason") in ("ScaledUp", "ScaledDown")]
    sent = counted.sent or 0
    lost, duplicated = numbered_counts(target, counted.remote, args.partitions, sent)
    kapi.delete("KafkaMirrorMaker2", namespace, NAME)  # its status refresh reads no lag during the next mode
    load_end = args.warmup + args.burst + args.after
    out = summary(sampler.points, args.warmup, args.warmup + args.burst, load_end, lost, duplicated,
                  sent * args.partitions)
    out.update(namespace=namespace, topic=topic, caught_up=caught_up, scaling=events,
               sampler_errors=sampler.errors[:5],
               runner_errors=runner_errors[:5])
    print(f"  {mode}: drain {out['drain_s']} s, {out['core_s']} core s, lanes {out['lanes_min']}..{out['lanes_max']}"
          f", max lag {out['max_lag']}, produced/s {out['produced_per_s']}, {out['records']:,} records, lost {lost}, "
          f"duplicated {duplicated}", flush=True)
    return out


def _phase(sampler: Sampler, seconds: float, mode: str, what: str) -> None:
    """Wait out a phase, a progress line per refresh or so."""
    end = time.monotonic() + seconds
    print(f"  {mode}: {what} for {seconds:g} s", flush=True)
    shown, failed = len(sampler.points), len(sampler.errors)
    while time.monotonic() < end:
        time.sleep(min(1.0, max(end - time.monotonic(), 0)))
        if len(sampler.errors) > failed:
            failed = len(sampler.errors)
            print(f"    a refresh not read: {sampler.errors[-1]}", flush=True)
        if len(sampler.points) > shown:
            shown = len(sampler.points)
            p = sampler.points[-1]
            print(f"    t={p.t:6.0f}s lag {p.lag} lanes {p.lanes} decided {p.decided} cores {p.cores} "
                  f"rate {p.rate}", flush=True)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.autoscale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default="on,off", help="which runs, in order; default %(default)s")
    p.add_argument("--rate", type=int, default=600, help="steady records/s over all partitions; default %(default)s")
    p.add_argument("--burst-factor", type=float, default=4.0, help="the burst's rate / the steady rate")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--warmup", type=float, default=120.0, help="seconds at the steady rate before the burst")
    p.add_argument("--burst", type=float, default=90.0, help="seconds of the burst; default %(default)s")
    p.add_argument("--after", type=float, default=300.0, help="seconds at the steady rate after it")
    p.add_argument("--record-cost-us", type=float, default=800.0,
                   help="microseconds each record costs its lane (a sleep; 0: none); default %(default)s")
    p.add_argument("--off-lanes", type=int, default=1, help="the fixed lanes of `off`; default %(default)s")
    p.add_argument("--min-lanes", type=int, default=1)
    p.add_argument("--max-lanes", type=int, default=4)
    p.add_argument("--target-lag", type=float, default=30.0, help="spec.autoscaling.targetLagSeconds")
    p.add_argument("--cooldown", type=int, default=60, help="spec.autoscaling.cooldownSeconds")
    p.add_argument("--scale-down-delay", type=int, default=90, help="spec.autoscaling.scaleDownDelaySeconds")
    p.add_argument("--status-interval", type=float, default=5.0, help="the operator's status refresh, seconds")
    p.add_argument("--epoch", type=float, default=10.0, help="spec.spark.epochSeconds")
    p.add_argument("--catch-up", type=float, default=600.0, help="longest wait for the last records, seconds")
    p.add_argument("--work", type=Path, default=HERE / "work" / "autoscale")
    p.add_argument("--results", type=Path, default=HERE / "results")
    args = p.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in args.modes if m not in ("on", "off")]
    if bad or not args.modes:
        p.error(f"--modes: {','.join(bad) or 'none'}: give on, off or both")
    if not 1 <= args.min_lanes <= args.max_lanes:
        p.error("--min-lanes must be at least 1 and at most --max-lanes")
    return args


def _terminated(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # the ground's processes are stopped on the way out


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    _environment(args)
    signal.signal(signal.SIGTERM, _terminated)
    from sparkmirror_dev.env import start_all
    from sparkmirror_dev.kafka import KafkaCluster
    from sparkmirror_dev.kube import KubeApiServer
    from sparkmirror_operator.kubeapi import KubeApi
    from tests.support.operatorrun import install_kmm2_crd, running_operator

    from . import autoscaleparts
    from .gitstate import commit
    from .autoscaleplot import plot

    at = commit(ROOT)  # the code that runs is the code at the start
    load_before = os.getloadavg()  # a loaded machine stretches every handoff: said beside the figures
    work = args.work / time.strftime("%Y%m%dT%H%M%S")
    args.work = work
    work.mkdir(parents=True, exist_ok=True)
    kube = KubeApiServer(work / "kube")
    clusters = [KafkaCluster("a", work / "a"), KafkaCluster("b", work / "b")]
    modes: dict[str, dict] = {}
    failed: dict[str, str] = {}
    try:
        print("ground: kube-apiserver, two Kafka clusters, the operator", flush=True)
        start_all([kube, *clusters])
        install_kmm2_crd(kube)
        with running_operator(kube, "--all-namespaces"), kube.api_client() as api:
            kapi = KubeApi(api, field_manager="sparkmirror-bench")
            for mode in args.modes:
                print(f"{mode}: {args.rate:,} records/s, {args.burst_factor:g}x for {args.burst:g} s", flush=True)
                try:
                    modes[mode] = run_mode(mode, kube, kapi, clusters[0].bootstrap, clusters[1].bootstrap, args)
                except Exception as e:  # noqa: BLE001 - the other mode still runs; the run fails (exit 1)
                    failed[mode] = f"{type(e).__name__}: {e}"
                    print(f"  {mode} failed: {failed[mode]}", flush=True)
    finally:
        for c in clusters:
            c.stop()
        kube.stop()
    config = {"rate_records": args.rate, "burst_factor": args.burst_factor, "partitions": args.partitions,
              "warmup_s": args.warmup, "burst_s": args.burst, "after_s": args.after,
              "record_cost_us": args.record_cost_us, "off_lanes": args.off_lanes, "epoch_s": args.epoch,
              "status_interval_s": args.status_interval, "autoscaling": autoscaling_spec(args),
              "machine": {"cpus": os.cpu_count(), "loadavg_start": [round(x, 1) for x in load_before],
                          "loadavg_end": [round(x, 1) for x in os.getloadavg()]}}
    doc = autoscaleparts.document(modes, config, at, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), failed)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "autoscale.json").write_text(json.dumps(doc, indent=2) + "\n")
    plot(doc, args.results / "autoscale.png")
    (args.results / "autoscale.md").write_text(autoscaleparts.markdown(doc, "autoscale.png"))
    print(f"wrote {args.results / 'autoscale.json'}, .md, .png", flush=True)
    ok = not failed and all(m["lost"] == 0 and m["duplicated"] == 0 and m["caught_up"] for m in modes.values())
    if "on" in modes:
        ok = ok and autoscaleparts.within_bounds(modes["on"], args.min_lanes, args.max_lanes)
    if "off" in modes:
        ok = ok and autoscaleparts.within_bounds(modes["off"], args.off_lanes, args.off_lanes)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
