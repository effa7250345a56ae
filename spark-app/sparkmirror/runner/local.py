"""Runs flow groups in one embedded local Spark session (`driver.Driver`), with their services; no Kubernetes."""
from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..driver import Driver
from ..resource.flowgroup import FlowGroupConfig

log = logging.getLogger(__name__)


class Unreachable(RuntimeError):
    """A cluster did not answer; the message names the resource field with its bootstrap servers."""


def preflight(configs: list[FlowGroupConfig], fields: dict[str, dict[str, str]], timeout: float = 10.0) -> None:
    """Every cluster of every flow group answers a metadata request, or Unreachable names the field."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    seen: set[str] = set()
    problems = []
    for cfg in configs:
        for c in cfg.clusters:
            if c.bootstrapServers in seen:
                continue
            seen.add(c.bootstrapServers)
            where = fields.get(cfg.name, {}).get(c.alias, f"clusters[{c.alias}].bootstrapServers")
            try:
                admin = AdminClient({**c.client_config(), "socket.connection.setup.timeout.ms": str(int(timeout * 1000))})
                admin.list_topics(timeout=timeout)
            except KafkaException as e:
                problems.append(f"{where}: cluster {c.alias!r} at {c.bootstrapServers} is unreachable "
                                f"({e.args[0].str() if e.args else e})")
            except KeyError as e:  # a secret named by environment variable is missing
                problems.append(f"{where}: cluster {c.alias!r}: {e.args[0]}")
            except OSError as e:  # a certificate or password file that is not there
                problems.append(f"{where}: cluster {c.alias!r}: {e}")
    if problems:
        raise Unreachable("\n".join(problems))


@dataclass
class MirrorView:
    flow_group: str
    mirror: str
    source: str
    target: str
    topics: int
    partitions: int
    records_per_s: float
    bytes_per_s: float
    lag: int | None
    records_total: int
    errors: dict
    waiting: str | None = None        # "target cluster 'b' unreachable": a cluster does not answer, no error
    waiting_since: float | None = None


def default_master(configs: list[FlowGroupConfig], most_lanes: dict[str, int] | None = None) -> str:
    """Local Spark with a task thread for every lane twice over: lanes copy for a whole epoch, so a lane without a
    thread would wait an epoch, and during a handoff the old generation's lanes still hold theirs. Threads, not
    cores: lanes mostly wait on the network. `most_lanes` (flow group -> lanes per mirror): the most autoscaling
    may give a group, so the threads are there when it does."""
    most_lanes = most_lanes or {}
    lanes = sum(max(c.lanes_of(m), most_lanes.get(c.name, 0)) for c in configs for m in c.mirrors)
    return f"local[{max(4, 2 * lanes + 2)},4]"


class LocalRun(Driver):
    """The driver in this process, with local defaults (2 cores, small memory, no UI, metrics on loopback) and
    the views the `run` display shows."""

    def __init__(self, configs: list[FlowGroupConfig], master: str | None = None, checkpoint_root: str | None = None,
                 spark_conf: dict[str, str] | None = None, metrics_bind: str = "127.0.0.1",
                 most_lanes: dict[str, int] | None = None) -> None:
        super().__init__(configs, master or default_master(configs, most_lanes),
                         {"spark.driver.memory": "512m", "spark.ui.enabled": "false",
                          "spark.sql.streaming.stopTimeout": "60s", **(spark_conf or {})},
                         checkpoint_root or tempfile.mkdtemp(prefix="sparkmirror-run-"), metrics_bind)

    def start(self) -> "LocalRun":
        # Python workers must run this interpreter (its venv holds sparkmirror), not whatever `python3` is on PATH
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        super().start()
        return self

    def views(self) -> list[MirrorView]:
        out = []
        for cfg, svc in zip(self.configs, self.services):
            for name, s in svc.snapshot().items():
                out.append(MirrorView(cfg.name, name, s["source"], s["target"], s["topics"], s["partitions"],
                                      s["records_per_s"], s["bytes_per_s"], s["lag"], s["records_total"],
                                      s["errors"], s.get("waiting"), s.get("waiting_since")))
        return out

    def caught_up(self, min_topics: int = 1) -> bool:
        """Every mirror has at least `min_topics` data topics and no lag on them.

        Heartbeats topics are left out: MM2 replicates them like data, but they never stop growing (a mirror
        the other way writes one every second), so their lag is never 0 for long.
        """
        from ..replication import policy_for

        snaps = [(cfg, svc.snapshot()) for cfg, svc in zip(self.configs, self.services)]
        if not snaps:
            return False
        for cfg, snap in snaps:
            for m in cfg.mirrors:
                s = snap.get(m.name)
                if s is None or s["errors"]:
                    return False
                policy = policy_for(m)
                data = [p for p in s["partitions_detail"] if not policy.is_heartbeats_topic(p["topic"])]
                if len({p["topic"] for p in data}) < min_topics or any(p["lag"] != 0 for p in data):
                    return False
        return True


def wait(run: LocalRun, stop: threading.Event, on_tick: Callable[[LocalRun], None] | None = None,
         until: Callable[[LocalRun], bool] | None = None, interval: float = 1.0,
         timeout: float | None = None) -> str:
    """Tick until stopped ('stopped'), a query fails ('failed'), `until` holds ('done') or time runs out."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while not stop.is_set():
        if on_tick is not None:
            on_tick(run)
        if run.failures():
            return "failed"
        superseded = run.superseded()
        if superseded:
            for why in superseded.values():
                print(f"sparkmirror run: {why}: stopping", file=sys.stderr, flush=True)
            return "superseded"
        if until is not None and until(run):
            return "done"
        if deadline is not None and time.monotonic() > deadline:
            return "timeout"
        stop.wait(interval)
    return "stopped"
