"""The mirror as a PySpark streaming data source: Spark plans, places and retries lanes; lanes copy.

Offsets are epoch numbers, not Kafka offsets. Each micro-batch is one *epoch*: `partitions()` returns one
InputPartition per non-empty lane, and each lane task copies continuously for `epochSeconds`, committing a
small transaction every ~`commitIntervalMs` (the bounded-epoch design; see README.md for the measurement
that chose it over planned offset ranges per micro-batch). The rows a task yields are per-partition summaries
(`copying.SUMMARY_SCHEMA`); records never enter the JVM.

Correctness never depends on Spark's offsets or checkpoint: a lane resumes from the progress topic on the
target, so re-running an epoch (restart, task retry) repeats nothing and skips nothing. Epoch numbers only
have to increase; they are the planning time in milliseconds, so they keep increasing across restarts.

Topic management runs on the driver beside the planning (`liveroutes.LiveRoutes`): every
`refreshTopicsIntervalSeconds` it calls `TopicSync.sync()` (create/update remote topics, return routes) and
each epoch is planned from the latest routes without waiting for a sync. A lane takes the topics/partitions
the source gains mid-epoch in place (routewatch.py), also in an epoch another worker runs for it; a standby
lane ends its epoch early instead, and the planner then waits for a fresh sync. New ones are picked up within
about one refresh interval, not one epoch.
"""
from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence

from pyspark import TaskContext
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .copying import SUMMARY_SCHEMA, CopyError, PartitionSummary, lane_copy, run_epoch
from .liveroutes import LiveRoutes, Route, last_tick
from .resource.flowgroup import FlowGroupConfig, Mirror
from .lanes import Lane, LanePartition, LanePlanner
from .routewatch import RouteWatch

log = logging.getLogger("sparkmirror.datasource")

FORMAT = "sparkmirror"
CARRY_SECONDS = 15.0
"""Longest a lane keeps copying after its epoch while its next task is being scheduled."""


class LaneInputPartition(InputPartition):
    """What one lane task needs: the flow-group config (secrets stay references), its partitions, all routes."""

    def __init__(self, config_json: str, mirror: str, lane: int, partitions: tuple[LanePartition, ...],
                 epoch: int, routes: tuple[tuple[str, str, int], ...], prev_epoch: int | None = None,
                 standby: bool = False) -> None:
        super().__init__((mirror, lane, epoch))
        self.prev_epoch = prev_epoch
        self.config_json = config_json
        self.mirror = mirror
        self.lane = lane
        self.partitions = partitions
        self.epoch = epoch
        self.routes = routes
        self.standby = standby


def _mirror(config: FlowGroupConfig, name: str) -> Mirror:
    for m in config.mirrors:
        if m.name == name:
            return m
    raise ValueError(f"mirror {name!r} is not in flow group {config.name!r}: "
                     f"{[m.name for m in config.mirrors]}")


def _worker_logging() -> None:
    """Lane logs (start-up time, fencing, gaps) at INFO on the executor's stderr, where Spark keeps them."""
    lg = logging.getLogger("sparkmirror")
    if not lg.handlers:
        h = logging.StreamHandler()
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        lg.addHandler(h)
        lg.setLevel(logging.INFO)
        lg.propagate = False


@functools.cache
def warm_result_conversion() -> None:
    """Spark turns a lane task's rows into an Arrow batch, and pyarrow's first conversion of Python values in a
    process imports pandas (350-400 modules, 0.26-0.36 CPU s). Left to Spark, each Python worker paid that as
    its first epoch ended, while the lanes copied across the boundary on the same cores; a worker's first task
    pays it before its lane starts instead (bench: 0.26 s of a worker's main-thread CPU at the first boundary,
    0.02 at later ones). Logged once per worker, so the job's log shows it ran before the worker's first lane."""
    t0 = time.process_time()
    import pyarrow

    pyarrow.array([0])
    log.info("Python worker %d: Arrow's row conversion warmed in %.2f CPU s", os.getpid(), time.process_time() - t0)


class MirrorStreamReader(DataSourceStreamReader):
    """Driver side planning (latestOffset/partitions) plus the executor side `read` of one lane."""

    def __init__(self, options: dict[str, str]) -> None:
        # Keep construction cheap and picklable: Spark builds one of these to ship `read` to executors.
        self.config_json = options["config"]
        self.mirror_name = options["mirror"]
        self.drain_file = options.get("drainFile") or ""
        self.go_file = options.get("goFile") or ""
        self._sync = None
        self._progress_ready = False
        self._routes: list[tuple[str, str, int]] | None = None
        self._synced_at = float("-inf")
        self._last_epoch = 0
        self._standby_epoch = 0  # the epoch planned before the go file existed: its lanes wait for the go mark
        self._live: LiveRoutes | None = None
        self._plan: tuple[tuple[tuple[str, str, int], ...], list[Lane]] | None = None  # routes -> their lanes
        self._planner: LanePlanner | None = None  # keeps each route's split for the next plan
        self._offset_ms = 0.0  # how long the last latestOffset() took
        self._planned_at: float | None = None  # when the running epoch was planned (monotonic)

    def __getstate__(self) -> dict:
        return {"config_json": self.config_json, "mirror_name": self.mirror_name, "drain_file": self.drain_file,
                "go_file": self.go_file,
                "_sync": None, "_progress_ready": False, "_live": None, "_offset_ms": 0.0, "_planned_at": None,
                "_plan": None, "_planner": None,
                "_routes": self._routes, "_synced_at": float("-inf"), "_last_epoch": self._last_epoch}

    # ---- driver --------------------------------------------------------------------------------------------

    def _config(self) -> tuple[FlowGroupConfig, Mirror]:
        config = FlowGroupConfig.model_validate_json(self.config_json)
        return config, _mirror(config, self.mirror_name)

    def refresh_routes(self, force: bool = False, routed: Callable[[list[Route]], None] | None = None
                       ) -> list[Route]:
        """TopicSync.sync() at most every refreshTopicsIntervalSeconds (`_routes_live` runs it on its own thread
        and says which errors stop the query); `routed` gets the routes once decided (TopicSync.sync)."""
        config, mirror = self._config()
        from .copying.errors import transient_reason
        from .progress import ensure_progress_topic
        from .topicsync import TopicSync

        if self._sync is None:  # kept from the first try: its refusal grace counts from the first refusal
            self._sync = TopicSync(config, mirror)
        sync = self._sync
        try:
            if not self._progress_ready:
                ensure_progress_topic(config.cluster(mirror.target).client_config(), config.progressTopic,
                                      replication_factor=config.progressTopicReplicationFactor)
                self._progress_ready = True
            now = time.monotonic()
            if force or self._routes is None or now - self._synced_at >= mirror.refreshTopicsIntervalSeconds:
                def as_routes(routes: list) -> list[Route]:
                    return sorted((r.source_topic, r.target_topic, r.partitions) for r in routes)

                routes = self._sync.sync(None if routed is None else lambda rs: routed(as_routes(rs)))
                self._routes = as_routes(routes)
                self._synced_at = now
        except Exception as e:
            if transient_reason(e) is None:
                raise
            failure = e
        else:
            return self._routes
        sync.check_refusals()  # a refused login looks like an outage: say so and stop (outside the except: the
        raise failure          # error must not carry the transient one as its context, or it would be retried)

    def initialOffset(self) -> dict:
        return {"epoch": 0}

    def _routes_live(self) -> LiveRoutes:
        """Routes synced on their own thread, the last ones kept while a cluster does not answer (retried with
        backoff, said once). Only permanent errors stop the query: `current()` raises them."""
        if self._live is None:
            from .copying.errors import transient_reason
            from .outage import Retrying

            retrying = Retrying(f"mirror {self.mirror_name!r} topic management", "a cluster", transient_reason)
            self._live = LiveRoutes(lambda routed: self.refresh_routes(force=True, routed=routed),
                                    self._config()[1].refreshTopicsIntervalSeconds, retrying)
        return self._live

    def latestOffset(self) -> dict:
        t0 = time.monotonic()
        try:
            return self._latest_offset()
        finally:
            self._offset_ms = (time.monotonic() - t0) * 1000

    def _latest_offset(self) -> dict:
        if self.drain_file and os.path.exists(self.drain_file):
            # draining for a clean stop: plan no new epoch, so the running one ends and commits normally
            return {"epoch": self._last_epoch}
        live = self._routes_live()
        config = self._config()[0]
        if self._planned_at is not None and time.monotonic() - self._planned_at < 0.9 * config.epochSeconds:
            # the epoch ended early, most often because a lane saw new topics or partitions: plan the next one
            # from a sync that has seen them too (bounded: a slow cluster must not stop the planning)
            routes = live.fresh(timeout=30.0, since=last_tick(live.interval))
            if routes is not None and self._plan is not None and tuple(routes) == self._plan[0]:
                # that sync listed the source before the lanes did (they look when their loop next asks, up to a
                # commit interval after the tick) and missed what they saw: one more, not another tick's wait
                routes = live.fresh(timeout=30.0)
        else:
            routes = live.current(wait=1.0)
        self._planned_at = None
        if self.go_file and not os.path.exists(self.go_file) and (routes is None or self._standby_epoch):
            # standby (a worker generation that has not taken over yet): one epoch whose lanes wait, no more
            return {"epoch": self._last_epoch}
        if routes is None:  # nothing to plan with yet (current() waited a second): ask again soon
            return {"epoch": self._last_epoch}
        self._last_epoch = max(self._last_epoch + 1, int(time.time() * 1000))
        self._planned_at = time.monotonic()
        if self.go_file and not os.path.exists(self.go_file):
            self._standby_epoch = self._last_epoch
        return {"epoch": self._last_epoch}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if start == end:
            return []
        t0 = time.monotonic()
        config, mirror = self._config()
        while (last := self._routes_live().current(wait=1.0)) is None:  # a replayed batch after a restart,
            pass                                                         # clusters away
        routes = tuple(last)
        if self._plan is None or self._plan[0] != routes:  # the same routes plan the same lanes; changed ones
            if self._planner is None:                       # split only their new routes (lanes.LanePlanner)
                self._planner = LanePlanner(mirror.name, config.lanes_of(mirror))
            self._plan = (routes, self._planner.plan(routes))
        lanes = self._plan[1]
        # planned before this generation took over (or replayed before it did): its lanes wait for the go mark
        standby = bool(self.go_file) and (int(end["epoch"]) == self._standby_epoch
                                          or not os.path.exists(self.go_file))
        out = [LaneInputPartition(self.config_json, mirror.name, lane.index, lane.partitions, int(end["epoch"]),
                                  routes, int(start["epoch"]), standby) for lane in lanes if lane.partitions]
        if not logging.getLogger().handlers:  # Spark's Python source runner, where nothing set logging up
            _worker_logging()
        # the driver-side cost of an epoch as topics and partitions grow (bench/scale.py reads it)
        lanes_ms = (time.monotonic() - t0) * 1000
        log.info("mirror %s epoch %s planned in %.0f ms (latest offset and topic sync %.0f ms, lanes %.0f ms): "
                 "%d lanes over %d partitions of %d topics", mirror.name, end["epoch"], self._offset_ms + lanes_ms,
                 self._offset_ms, lanes_ms, len(out), sum(n for _s, _t, n in routes), len(routes))
        return out

    def commit(self, end: dict) -> None:
        """Nothing to do: lanes committed to the target themselves; Spark's offsets are only epoch ids."""

    def stop(self) -> None:
        """The query stops: so does its topic management."""
        if self._live is not None:
            self._live.close()

    # ---- executor ------------------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        assert isinstance(partition, LaneInputPartition)
        _worker_logging()
        warm_result_conversion()
        config = FlowGroupConfig.model_validate_json(partition.config_json)
        mirror = _mirror(config, partition.mirror)
        watch = RouteWatch(config, mirror, partition.routes, partition.lane)
        ctx = TaskContext.get()
        copier = lane_copy(config, mirror, partition.lane, list(partition.partitions), should_stop=watch.changed,
                          epoch=partition.epoch, prev_epoch=partition.prev_epoch,
                          attempt=ctx.attemptNumber() if ctx is not None else 0,
                          carry_seconds=min(float(config.epochSeconds), CARRY_SECONDS), stop_file=self.drain_file,
                          standby=partition.standby, watch=watch)
        try:
            summaries = run_epoch(copier)
        except CopyError as e:
            # Permanent (the target refuses a record, the source lost offsets): no point in Spark retrying the
            # task. Report what was committed plus one error row; the driver fails the query with the message.
            log.error("%s", e)
            for summary in copier.summaries.values():
                yield summary.row()
            yield PartitionSummary(mirror.name, partition.lane, "", -1, "", error=str(e)).row()
            return
        t0 = time.monotonic()
        for summary in summaries:
            yield summary.row()
        if len(summaries) >= 1000:  # the epoch boundary's cost at scale: Spark takes the rows as they come
            log.info("lane %s: %d rows handed to Spark in %.0f ms", copier.tid, len(summaries),
                     (time.monotonic() - t0) * 1000)


class MirrorDataSource(DataSource):
    """`spark.readStream.format("sparkmirror").option("config", <json>).option("mirror", <name>)`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SUMMARY_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MirrorStreamReader(self.options)
