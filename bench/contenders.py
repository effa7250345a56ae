"""What gets benchmarked: MirrorMaker 2 (dedicated mode, with and without exactly-once) and sparkmirror's job
(exactly-once and at-least-once), each started as its own process group and stopped by that group only."""
from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sparkmirror_dev import install
from sparkmirror_dev.kafka import java_cmd
from sparkmirror_dev.procs import log_tail, spawn, stop_pid

SOURCE_ALIAS = "src"
TARGET_ALIAS = "tgt"
# consumer groups that belong to the benchmark itself, never translated by either mirror
GROUPS_EXCLUDE = r"bench-.*|console-consumer-.*|connect-.*|__.*"


@dataclass
class MirrorSetup:
    source: str          # bootstrap
    target: str          # bootstrap
    topics: str          # regex of source topics
    parallelism: int     # MM2 tasks.max == sparkmirror lanes
    workdir: Path


class BenchError(RuntimeError):
    """A run that cannot give a figure: the contender failed, or the target does not hold what it should."""


def remote_name(topic: str) -> str:
    """Both contenders use MM2's DefaultReplicationPolicy: `<source alias>.<topic>`."""
    return f"{SOURCE_ALIAS}.{topic}"


class Contender:
    name: str = ""
    label: str = ""
    family: str = ""          # "mm2" or "sparkmirror"
    exactly_once: bool = False

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.log: Path | None = None

    def command(self, setup: MirrorSetup) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def start(self, setup: MirrorSetup) -> int:
        setup.workdir.mkdir(parents=True, exist_ok=True)
        cmd, env = self.command(setup)
        self.log = setup.workdir / f"{self.name}.log"
        self.proc = spawn(cmd, self.log, env=env, cwd=setup.workdir)
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def failure(self) -> str | None:
        """Why the running contender will copy nothing more although its process lives on, if it says so."""
        return None

    def check(self) -> None:
        """Raise BenchError when the contender exited or gave up: a run must not wait out its whole timeout."""
        if not self.alive():
            raise BenchError(f"{self.name} exited with code {self.proc.returncode if self.proc else '?'}; last "
                             f"lines of {self.log}:\n{log_tail(self.log, 40) if self.log else ''}")
        why = self.failure()
        if why:
            raise BenchError(f"{self.name}: {why} (see {self.log})")

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc.pid, timeout=20)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None


class MirrorMaker2(Contender):
    family = "mm2"

    # batch.size as sparkmirror's lane producers (1 MB), linger 5 ms. The Java producer puts all of a broker's
    # partitions in one request, librdkafka one partition a request: at the latency run's 4 partitions a task
    # this makes about as many requests as an at-least-once lane at its 20 ms (LINGER_MS_AT_LEAST_ONCE);
    # exactly-once lanes linger their commit interval and send once a commit. `stock_clients` keeps Kafka's
    # defaults (16 KiB)
    MATCHED_PRODUCER = {"batch.size": "1000000", "linger.ms": "5"}
    stock_clients = False

    def __init__(self, exactly_once: bool) -> None:
        super().__init__()
        self.exactly_once = exactly_once
        self.name = "mm2-eos" if exactly_once else "mm2"
        self.label = "MM2 exactly-once" if exactly_once else "MM2 at-least-once"

    _scanned = 0  # bytes of the log read so far
    _killed: str | None = None
    KILLED = b"Task is being killed and will not recover"
    """Connect's line for a task that failed for good: the worker lives on, and the task copies nothing more
    until someone restarts it (its exactly-once task does so at times on its first commit: InvalidTxnState)."""

    def start(self, setup: MirrorSetup) -> int:
        self._scanned, self._killed = 0, None  # a new log
        return super().start(setup)

    def failure(self) -> str | None:
        """A task Connect killed, read from the log as it grows."""
        if self._killed is None and self.log is not None and self.log.exists():
            with open(self.log, "rb") as f:
                f.seek(self._scanned)
                chunk = f.read()
            cut = chunk.rfind(b"\n") + 1  # whole lines only; the rest is read again next time
            for line in chunk[:cut].splitlines():
                if self.KILLED in line:
                    self._killed = "Connect killed a task: " + line.decode(errors="replace").strip()[:300]
                    break
            self._scanned += cut
        return self._killed

    def properties(self, s: MirrorSetup) -> dict[str, str]:
        S, T = SOURCE_ALIAS, TARGET_ALIAS
        props = {
            "clusters": f"{S}, {T}",
            f"{S}.bootstrap.servers": s.source,
            f"{T}.bootstrap.servers": s.target,
            f"{S}->{T}.enabled": "true",
            f"{S}->{T}.topics": s.topics,
            f"{S}->{T}.groups.exclude": GROUPS_EXCLUDE,
            f"{T}->{S}.enabled": "false",
            f"{T}->{S}.emit.heartbeats.enabled": "false",
            "replication.policy.class": "org.apache.kafka.connect.mirror.DefaultReplicationPolicy",
            "replication.policy.separator": ".",
            "tasks.max": str(s.parallelism),
            # the same cadence sparkmirror's flow group is given
            "emit.heartbeats.enabled": "true",
            "emit.heartbeats.interval.seconds": "1",
            "emit.checkpoints.enabled": "true",
            "emit.checkpoints.interval.seconds": "60",
            "sync.group.offsets.enabled": "false",
            "refresh.topics.interval.seconds": "5",
            "refresh.groups.interval.seconds": "60",
            "sync.topic.configs.enabled": "true",
            "sync.topic.acls.enabled": "false",   # the local brokers have no authorizer
            # single-broker clusters
            "replication.factor": "1",
            "checkpoints.topic.replication.factor": "1",
            "heartbeats.topic.replication.factor": "1",
            "offset-syncs.topic.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "config.storage.replication.factor": "1",
            f"{S}->{T}.consumer.auto.offset.reset": "earliest",
        }
        if not self.stock_clients:
            for k, v in self.MATCHED_PRODUCER.items():
                props[f"{T}.producer.{k}"] = v
        if self.exactly_once:
            # KIP-618 exactly-once source support for dedicated mode (Kafka >= 3.5): per target cluster
            props[f"{T}.exactly.once.source.support"] = "enabled"
            props[f"{S}->{T}.consumer.isolation.level"] = "read_committed"
        return props

    def command(self, setup: MirrorSetup) -> tuple[list[str], dict[str, str]]:
        path = setup.workdir / f"{self.name}.properties"
        path.write_text("".join(f"{k} = {v}\n" for k, v in self.properties(setup).items()))
        # connect-mirror-maker.sh's heap: -Xms256M -Xmx2G
        cmd = java_cmd(install.mirrormaker2(), "org.apache.kafka.connect.mirror.MirrorMaker", str(path), heap="2G")
        cmd = ["-Xms256M" if a == "-Xms2G" else a for a in cmd]
        return cmd, {}


class SparkMirror(Contender):
    family = "sparkmirror"
    # the flow group's commitIntervalMs; None keeps the resource's default (`--commit-interval-ms`)
    commit_interval_ms: int | None = None
    # the lane producers' lingerMs; None keeps the resource's default for the delivery mode (`--linger-ms`)
    linger_ms: int | None = None

    def __init__(self, exactly_once: bool, batches: bool = False) -> None:
        super().__init__()
        self.exactly_once, self.batches = exactly_once, batches
        self.name = ("sparkmirror-eos" if exactly_once else "sparkmirror-alo") + ("-batches" if batches else "")
        self.label = ("sparkmirror exactly-once" if exactly_once else "sparkmirror at-least-once") + \
            (" on batches" if batches else "")

    @staticmethod
    def available() -> bool:
        try:
            import importlib.util

            return importlib.util.find_spec("sparkmirror.job") is not None
        except ImportError:
            return False

    def flowgroup(self, s: MirrorSetup):  # noqa: ANN201
        from sparkmirror.resource.flowgroup import FlowGroupConfig

        return FlowGroupConfig.model_validate({
            "name": "bench",
            "resource": "bench/mirror",
            "clusters": [{"alias": SOURCE_ALIAS, "bootstrapServers": s.source},
                         {"alias": TARGET_ALIAS, "bootstrapServers": s.target}],
            "mirrors": [{
                "name": f"{SOURCE_ALIAS}-to-{TARGET_ALIAS}",
                "source": SOURCE_ALIAS,
                "target": TARGET_ALIAS,
                "topics": s.topics,
                "groupsExclude": GROUPS_EXCLUDE,
                "replicationPolicy": "default",
                "separator": ".",
                "refreshTopicsIntervalSeconds": 5,
                "syncTopicConfigs": True,
                "emitHeartbeats": True,
                "emitHeartbeatsIntervalSeconds": 1,
                "emitCheckpoints": True,
                "emitCheckpointsIntervalSeconds": 60,
                "replicationFactor": 1,
            }],
            "delivery": "exactly-once" if self.exactly_once else "at-least-once",
            "copy": "batches" if self.batches else "records",
            "lanes": s.parallelism,
            **({"commitIntervalMs": self.commit_interval_ms} if self.commit_interval_ms else {}),
            **({"lingerMs": self.linger_ms} if self.linger_ms is not None else {}),
            "checkpointDir": str(s.workdir / "checkpoint"),
        })

    def command(self, setup: MirrorSetup) -> tuple[list[str], dict[str, str]]:
        path = setup.workdir / f"{self.name}.yaml"
        path.write_text(self.flowgroup(setup).to_yaml())
        env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_HOSTNAME": "localhost"}
        return [sys.executable, "-m", "sparkmirror.job", "--config", str(path)], env


class RdkafkaPipe(Contender):
    """bench/pipe.py: Python + librdkafka with nothing else; a reference for what the copy loop can do."""

    family = "reference"
    name = "pipe"
    label = "reference: bare Python+librdkafka pipe"

    def command(self, setup: MirrorSetup) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-m", "bench.pipe", "--source", setup.source, "--target", setup.target,
                "--topics", setup.topics, "--lanes", str(setup.parallelism), "--prefix", f"{SOURCE_ALIAS}."], \
            {"PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def all_contenders(include_sparkmirror: bool | None = None) -> list[Contender]:
    out: list[Contender] = [MirrorMaker2(False), MirrorMaker2(True)]
    if include_sparkmirror is None:
        include_sparkmirror = SparkMirror.available()
    if include_sparkmirror:
        out = [SparkMirror(True, batches=True), SparkMirror(False, batches=True), SparkMirror(True), SparkMirror(False),
               *out]
    return out


def rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
