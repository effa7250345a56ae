"""The driver's life, one way for every entry point (`spark-submit job.py`, `python -m sparkmirror.job`,
`sparkmirror run`): the Spark session and one streaming query per mirror of each flow group (`queries`), the
driver services beside them (live lag, heartbeats, checkpoints, metrics), the Lease and the handoff, signals,
and a drain that lets running epochs commit before the exit code says why it stopped.
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path

from .queries import (RESTARTABLE, RESTARTS, checkpoint_root_of, drain, mirror_of, stop_query,
                      root_message, spark_session, start_queries, start_query)
from .resource.flowgroup import FlowGroupConfig
from .replicas import ReplicationFactorRefused
from .resource.names import EXIT_FAILED, EXIT_REFUSED, EXIT_TOO_FEW_BROKERS
from .stats import MirrorStats
from .exitcodes import NAMED_EXIT_CODES, exit_code_of
from .flowgrouprun import FlowGroupRun

log = logging.getLogger("sparkmirror.driver")


class Driver:
    """One driver process: a Spark session running every mirror of `configs`, with each flow group's services.

    `start()` then `stop()` (or `run()`, which also handles SIGTERM/SIGINT and reports failures). Services start
    before Spark: they show lag while Spark starts, and heartbeats begin at once.

    A flow group whose config names a Lease (`worker.leaseName`, the operator's) starts in standby: Spark up,
    Python workers warm, clusters answered, and it copies only once the Lease names its generation; it then
    takes over (handoff/takeover.py) and, when the Lease moves on to a later generation, stays a hot spare until
    that one committed its first epoch (then exits), or takes the flow group back if the Lease moves back
    (handoff/spare.py).
    `handoff()` hands flow groups over to new configs inside this driver (`sparkmirror run` on a changed file).
    """

    def __init__(self, configs: list[FlowGroupConfig], master: str | None = None,
                 spark_conf: dict[str, str] | None = None, checkpoint_root: str | None = None,
                 metrics_bind: str | None = None) -> None:
        self.initial = list(configs)
        self.master, self.spark_conf = master, spark_conf or {}
        self.checkpoint_root = checkpoint_root
        self.metrics_bind = metrics_bind
        self.stats: dict[str, MirrorStats] = {}
        self.spark = None
        self.groups: dict[str, FlowGroupRun] = {}
        self.lease = None  # handoff.lease.LeaseGate while the operator's Lease decides who copies
        self.lost = threading.Event()  # the Lease moved on: drain and exit
        self.handed_on = False  # another generation or a failover holds the flow groups now: never fence them
        self.restarts = 0  # queries started again after a RESTARTABLE failure
        self.history_cap: int | None = None  # offset history's ranges per partition, sized at start (historycap)

    # what runs now, in flow-group order
    @property
    def configs(self) -> list[FlowGroupConfig]:
        return [g.config for g in self.groups.values()] if self.groups else self.initial

    @property
    def services(self) -> list:
        return [g.services for g in self.groups.values()]

    @property
    def queries(self) -> list:
        return [q for g in self.groups.values() for q in g.queries]

    def stats_snapshot(self) -> dict[str, dict]:
        """{mirror name: MirrorStats.snapshot()}: what the services and the runner read of the epochs."""
        return {name: s.snapshot() for name, s in list(self.stats.items())}

    def jvm_memory(self) -> dict[str, int]:
        """The driver JVM's heap in bytes by area (empty before Spark is up): the metrics' driver memory."""
        jvm = getattr(self.spark, "_jvm", None) if self.spark is not None else None
        if jvm is None:
            return {}
        try:
            rt = jvm.java.lang.Runtime.getRuntime()
            total, free, most = int(rt.totalMemory()), int(rt.freeMemory()), int(rt.maxMemory())
        except Exception:  # noqa: BLE001 - a JVM going away while scraped: no figures this time
            return {}
        return {"heap_used": total - free, "heap_committed": total, "heap_max": most}

    def _services(self, cfg: FlowGroupConfig):
        from .metrics import DriverServices

        if cfg.offsetHistory is None and self.history_cap:  # a flow group handed over to: the cap sized at start
            cfg = cfg.model_copy(update={"offsetHistory": self.history_cap})
        return DriverServices(cfg, stats=self.stats_snapshot, bind=self.metrics_bind,
                              jvm_memory=self.jvm_memory).start()

    def start(self) -> "Driver":
        from .transforms import check as check_transforms

        check_transforms(self.initial)  # a callable that does not import: refused now, not in a lane mid-copy
        self.initial = [c if c.worker.leaseName else _after_marked(c) for c in self.initial]
        for cfg in self.initial:
            self.groups[cfg.name] = FlowGroupRun(cfg, self._services(cfg))
        self.spark = spark_session(self.initial[0], self.master, self.spark_conf)
        self._size_history()
        for run in self.groups.values():  # in standby until taken over
            self._standby_run(run)
        leased = [c for c in self.initial if c.worker.leaseName]
        if leased:
            from .handoff.lease import LeaseGate

            self.lease = LeaseGate.for_configs(leased)
            self.lease.keep_renewed()  # whenever the Lease names this generation, from now until the driver stops
            # a restart after a take-back: done, not to be done again when the watch sees the Lease's record
            self.lease.taken_back.update({run.taken_back for run in self.groups.values() if run.taken_back})
            self._standby()
            self.lease.wait_until_held(self.lost)
            if self.lost.is_set():
                return self
        for run in self.groups.values():
            before = {m.name: s.snapshot() if (s := self.stats.get(m.name)) else {} for m in run.config.mirrors}
            took = self._take_over(run.config)
            run.go()
            if self.lease is not None:  # once its first epoch committed: what the operator waits for
                from .handoff.pause import PauseClock

                self.lease.report_first_epoch(took, run.config.worker.leaseName, before, self.lost,
                                              lambda m=list(before): {n: s.snapshot() for n in m
                                                                      if (s := self.stats.get(n))},
                                              PauseClock(run.config).read)
        self.watch_lease()
        return self

    def _report_before_lease(self, code: int, message: str) -> None:
        """names.LEASE_FAILURE for an exit found before this driver follows its Leases (`start` ended early): the
        Spark operator's state carries only the code, so the status gets the words from here."""
        leased = [c for c in self.initial if c.worker.leaseName]
        if not leased:
            return
        from .handoff.lease import LeaseGate
        from .handoff.takeover import HandoffError

        try:
            LeaseGate.for_configs(leased).report_failure(code, message)
        except HandoffError as e:  # no Kubernetes API: the exit code alone reaches the status
            log.warning("cannot report the exit on the Lease: %s", e)

    def _size_history(self) -> None:
        """The offset history's cap from this driver's memory and partitions (`historycap`), before any epoch:
        `HistoryTooLarge` refuses the configuration (`run` exits EXIT_REFUSED, naming the fields)."""
        from .historycap import size_driver_history

        budget = size_driver_history(self.initial, self.spark.sparkContext.getConf().get("spark.driver.memory", None))
        if budget is None:
            return
        self.history_cap = budget.cap
        self.initial = [c.model_copy(update={"offsetHistory": budget.cap}) for c in self.initial]
        for run in self.groups.values():
            run.config = run.config.model_copy(update={"offsetHistory": budget.cap})
            if run.services is not None:
                run.services.size_history(budget.cap)

    def watch_lease(self) -> None:
        """The moment the Lease moves on, no new epoch is planned: its lanes' fresh starts would fence the later
        generation's lanes of the same ids (the main loop then makes this generation a hot spare)."""
        if self.lease is not None:
            self.lease.watch(self.lost, on_lost=lambda: [run.stop_planning() for run in self.groups.values()])

    def _standby_run(self, run: FlowGroupRun) -> None:
        """Refuse a generation that a later one superseded; start its queries: until `go` they plan one epoch,
        whose lanes make their clients and wait for the generation's go mark."""
        from .handoff.takeback import taken_back_before
        from .handoff.takeover import check_not_superseded, prepare

        run.taken_back = taken_back_before(run.config, check_not_superseded(run.config))
        prepare(run.config)
        run.checkpoint_root = checkpoint_root_of(run.config, self.checkpoint_root)
        run.queries = start_queries(self.spark, run.config, self.stats, run.checkpoint_root, run.drain_file,
                                    run.go_file)

    def _standby(self) -> None:
        """Spark up, executors' Python workers warm, every cluster answering, remote topics in place: then
        report ready, so that the copy starts within a moment of the Lease naming this generation."""
        from .handoff.warmup import warm_up

        warm_up(self.spark, self.configs, stop=self.lost)
        assert self.lease is not None
        if not self.lost.is_set():  # stopping already: never report ready
            self.lease.report_ready()

    def _take_over(self, cfg: FlowGroupConfig):
        from .handoff.takeover import take_over

        return take_over(cfg)

    def handoff(self, configs: list[FlowGroupConfig]) -> list[dict]:
        """Hand the flow groups that changed over to `configs` inside this driver, one handoff unit at a time:
        the new generation takes over (marks, fences the old lanes), its queries start, the old ones stop.
        Returns what each handoff did."""
        from .resource.rollout import handoff_units, next_generation, predecessors

        running = {name: g.config for name, g in self.groups.items()}
        desired = {c.name: c for c in configs}
        done = []
        for unit in handoff_units(running, desired):
            generation = max(c.worker.generation for c in running.values()) + 1
            preds = predecessors(unit, running)
            new = [FlowGroupRun(next_generation(desired[g], generation, preds), None) for g in unit.new]
            for run in new:  # standby: one epoch planned, its lanes' clients made, waiting for the go mark
                self._standby_run(run)
            old = [self.groups.pop(g) for g in unit.old]
            from .handoff.warmup import wait_for_tasks

            lanes = sum(r.config.lanes_of(m) for r in (*new, *old) for m in r.config.mirrors)
            wait_for_tasks(self.spark, lanes, 30.0)
            t0 = time.monotonic()
            for run in old:
                run.stop_planning()  # the old queries start no new epoch; their running lanes are fenced next
            for run in new:
                self._take_over(run.config)  # from here on the old lanes cannot commit
                run.go()
            took_ms = int((time.monotonic() - t0) * 1000)
            for run in old:
                run.services.stop()  # frees its metrics port for the new generation's
            for run in new:
                run.services = self._services(run.config)
                self.groups[run.config.name] = run
            for run in old:
                for q in run.queries:
                    stop_query(q)
            record = {"from": sorted(unit.old), "to": sorted(unit.new), "generation": generation,
                      "tookOverMs": took_ms, "stoppedMs": int((time.monotonic() - t0) * 1000)}
            log.info("handoff %s -> %s as generation %d: taken over in %d ms, old queries stopped after %d ms",
                     record["from"], record["to"], generation, took_ms, record["stoppedMs"])
            done.append(record)
        self.groups = dict(sorted(self.groups.items()))
        return done

    def failures(self) -> dict[str, str]:
        """mirror name -> error, for queries that stopped with an exception."""
        out = {}
        for q in self.queries:
            if not q.isActive:
                exc = q.exception()
                if exc is not None:
                    out[mirror_of(q.name)] = root_message(str(exc))
        return out

    def failure_codes(self) -> dict[str, int]:
        """mirror name -> exit code (names.EXIT_*), told from the whole exception text of its stopped query."""
        return {mirror_of(q.name): exit_code_of(str(exc)) for q in self.queries
                if not q.isActive and (exc := q.exception()) is not None}

    def stopped(self) -> bool:
        return any(not q.isActive for q in self.queries)

    def restart_failed(self) -> None:
        """Start again the queries that stopped for a RESTARTABLE reason (at most RESTARTS in all); what is left
        stopped is a failure `failures()` reports."""
        for run in self.groups.values():
            for i, q in enumerate(run.queries):
                if q.isActive or self.restarts >= RESTARTS:
                    continue
                exc = q.exception()
                why = next((m for m in RESTARTABLE if exc is not None and m in str(exc)), None)
                if why is None:
                    continue
                self.restarts += 1
                log.warning("query %s stopped: %s (Spark, not the mirror); starting it again from its checkpoint "
                            "(%d of at most %d)", q.name, why, self.restarts, RESTARTS)
                time.sleep(min(2.0 * self.restarts, 10.0))
                run.queries[i] = start_query(self.spark, run.config, mirror_of(q.name), self.stats,
                                             run.checkpoint_root, run.drain_file, run.go_file)

    def superseded(self) -> dict[str, str]:
        """flow group -> why it must stop: its progress topic says it was failed over, or names a later generation
        (another driver took it over). Without a Lease nothing else stops this driver, whose lanes would just find
        themselves fenced epoch after epoch; with one, a handoff is the Lease's to announce and only a failover or
        a rollback of this generation counts. Read from what the flow group's services follow of the progress topic: no request here."""
        out = {}
        for name, run in self.groups.items():
            why = run.services.superseded_why(failover_only=self.lease is not None) if run.services else None
            if why is not None:
                out[name] = why
        return out

    def stop(self) -> None:
        """Drain (no new epochs, running ones commit; at most one epoch plus 30 s), then stop everything."""
        # an epoch still interrupted at the deadline fails its foreachBatch with an InterruptedException that
        # py4j logs as an error; expected then (its open transactions are aborted, nothing is lost)
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
        t0 = time.monotonic()
        if self.queries:
            epoch = max(c.epochSeconds for c in self.configs)
            settle = self._settle_seconds(epoch)
            in_time = drain(self.queries, [g.drain_file for g in self.groups.values()], epoch + 30, settle)
            log.info("drained in %.1f s (%s)", time.monotonic() - t0,
                     "every epoch committed" if in_time else "an epoch was still running at the deadline")
            # always: a lane still in a transaction when Spark stops (an epoch past the deadline; a lane carrying
            # on between epochs past the settle window, on executors elsewhere or in a worker that hangs here)
            # would leave it open, holding read_committed consumers back until its timeout. No Spark query shows
            # a lane carrying on, so a drain "in time" does not rule it out; a fence costs one request per id
            self._fence_own_lanes("an epoch outlived the drain" if not in_time else
                                  "executors run elsewhere" if settle > 1.0 else "lanes may carry on between epochs")
        if self.lease is not None:
            self.lease.close()
        for svc in self.services:
            svc.stop()
        self.groups = {}
        if self.spark is not None:
            try:
                self.spark.stop()
            except Exception as e:  # noqa: BLE001
                log.warning("stopping Spark: %s", e)
            self.spark = None

    def _fence_own_lanes(self, why: str) -> None:
        """An epoch outlived the drain, or executors run elsewhere (a lane there may still be carrying on between
        epochs when Spark stops): lanes may hold transactions open, and read_committed
        consumers on the target would wait for them until the transaction timeout or the next start. Fence this
        driver's own lane ids (aborting those transactions), unless a later generation or a failover holds the
        flow group by now: its lanes may share those ids, and it fenced ours itself."""
        from .handoff.takeover import HandoffError, fence_all
        from .resource.names import transactional_ids

        if self.handed_on or (self.lease is not None and self.lease.successor is not None):
            return
        for run in self.groups.values():
            cfg = run.config
            if not run.copying:
                continue
            ids = {(alias, tid) for alias, tids in
                   transactional_ids(cfg.resource, cfg.name, cfg.lane_routes()).items() for tid in tids}
            t0 = time.monotonic()
            try:
                fence_all(cfg, ids, 15.0)
            except HandoffError as e:
                log.warning("fencing on the way out (%s): %s", why, e)
                continue
            log.info("flow group %s: %s; fenced its %d lane transactional ids in %d ms (their open transactions "
                     "are aborted)", cfg.name, why, len(ids), (time.monotonic() - t0) * 1000)

    def _settle_seconds(self, epoch_seconds: float) -> float:
        """How long lanes may go on copying between epochs after the last one: in local mode they see the drain
        file within a transaction; executors elsewhere cannot, and stop on their own after the carry window."""
        from .datasource import CARRY_SECONDS

        try:
            local = self.spark is None or self.spark.sparkContext.master.startswith("local")
        except Exception:  # noqa: BLE001 - a session already going away: no executors to wait for
            local = True
        return 1.0 if local else min(epoch_seconds, CARRY_SECONDS) + 2.0

    def run(self) -> int:
        """Run until stopped (SIGTERM/SIGINT: 0), a later generation took over after the Lease moved to it (0; a hot
        spare until then, which copies again if the Lease moves back) or a mirror fails (1)."""
        stopping = threading.Event()

        def on_signal(signum, _frame) -> None:
            log.info("signal %d: draining and stopping", signum)
            stopping.set()
            self.lost.set()  # also ends a standby wait

        main = threading.current_thread() is threading.main_thread()
        if main:
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
            _tell_launcher()
        from .handoff.takeover import HandoffError
        from .historybudget import HistoryTooLarge
        from .transforms import TransformRefused

        rc = 0
        try:
            try:
                self.start()
            except HandoffError as e:
                log.error("%s", e)
                print(f"sparkmirror: {e}", file=sys.stderr, flush=True)
                return 1
            except (HistoryTooLarge, TransformRefused) as e:  # the configuration cannot run: restarting cannot help
                log.error("%s", e)
                print(f"sparkmirror: {e}", file=sys.stderr, flush=True)
                self._report_before_lease(EXIT_REFUSED, str(e))
                return EXIT_REFUSED
            except ReplicationFactorRefused as e:  # a standby's warm-up syncs topics before any query runs
                log.error("%s", e)
                print(f"sparkmirror: {e}", file=sys.stderr, flush=True)
                if self.lease is not None:  # the status' words (names.LEASE_FAILURE)
                    self.lease.report_failure(EXIT_TOO_FEW_BROKERS, str(e))
                return EXIT_TOO_FEW_BROKERS
            if main:  # SparkContext put its own SIGINT handler in (cancel jobs, KeyboardInterrupt): drain instead
                signal.signal(signal.SIGINT, on_signal)
            while not stopping.is_set():
                if self.lost.is_set():
                    if self.lease is not None and self.lease.successor is not None and not stopping.is_set():
                        from .handoff.spare import serve_as_spare

                        if serve_as_spare(self, stopping):  # the Lease moved back: copying again
                            continue
                    stopping.set()
                    break
                superseded = self.superseded()
                if superseded:
                    self.handed_on = True
                    for why in superseded.values():
                        log.warning("%s: stopping", why)
                        print(f"sparkmirror: {why}: stopping", file=sys.stderr, flush=True)
                    stopping.set()
                    break
                if self.stopped():
                    self.restart_failed()
                if self.stopped():
                    codes, said = self.failure_codes(), []
                    for name, error in self.failures().items():
                        self.stats[name].error = self.stats[name].error or error
                        log.error("mirror %s failed: %s", name, error)
                        print(f"sparkmirror: mirror {name!r} failed: {error}", file=sys.stderr, flush=True)
                        rc = max(rc, codes.get(name, EXIT_FAILED))
                        said.append(f"mirror {name!r}: {error}")
                    if rc in NAMED_EXIT_CODES and self.lease is not None:  # the status' words (names.LEASE_FAILURE)
                        self.lease.report_failure(rc, "; ".join(said))
                    stopping.set()
                stopping.wait(1.0)
        finally:
            self.stop()
        return rc


PIDFILE_ENV = "SPARKMIRROR_DRIVER_PIDFILE"
"""Set by the Spark image's launcher (spark-app/image/entrypoint.sh): where this driver says, once it handles
SIGTERM, which process the pod's stop signal must reach (spark-submit's JVM has other Python children)."""


def _tell_launcher() -> None:
    path = os.environ.get(PIDFILE_ENV)
    if not path:
        return
    try:
        tmp = f"{path}.{os.getpid()}"
        Path(tmp).write_text(str(os.getpid()))
        os.replace(tmp, path)  # whole or absent: the launcher may read it at any moment
    except OSError as e:
        log.warning("cannot tell the launcher this driver's pid (%s): a pod stop will end Spark without a drain", e)


def _after_marked(cfg: FlowGroupConfig) -> FlowGroupConfig:
    """Without a Lease nobody else decides: this driver continues as the generation after the last one that
    took the flow group over (recorded on the progress topic), fencing the lanes that one held; never as a
    generation rolled back (a take-back's marks name them)."""
    from .handoff.takeover import HandoffError, marks_by_target, newest_of
    from .progress.state import failed_over_message
    from .resource.rollout import next_generation

    states = marks_by_target(cfg)
    last, failover = newest_of(cfg, states)
    if failover is not None:  # the mirror must not copy onto topics that consumers now read on the target
        raise HandoffError(failed_over_message(cfg.name, failover))
    top = max([0, *(s.ceiling(cfg.resource, cfg.resourceUid, cfg.name) for s in states.values())])
    if last is None or top < cfg.worker.generation:
        return cfg
    return next_generation(cfg, top + 1, [last, *cfg.worker.predecessors])
