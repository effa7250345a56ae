"""Helpers for the data-path tests: flow-group configs over the shared clusters, and reading a topic back."""
from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from sparkmirror_dev.testing import Rec, produce_numbered, read_topic, unique_name  # noqa: F401
from sparkmirror.resource.flowgroup import FlowGroupConfig


def wait_for(pred: Callable[[], bool], timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def mirror_once(cfg: FlowGroupConfig, epoch_seconds: float = 3.0) -> list:
    """Remote topics synced, progress topic made, then each lane of the first mirror run for one epoch (what
    is there gets copied); the routes."""
    from sparkmirror.copying import copy_lane
    from sparkmirror.lanes import plan_lanes
    from sparkmirror.progress import ensure_progress_topic
    from sparkmirror.topicsync import TopicSync

    mirror = cfg.mirrors[0]
    routes = TopicSync(cfg, mirror).sync()
    ensure_progress_topic(cfg.cluster(mirror.target).client_config(), cfg.progressTopic)
    for lane in plan_lanes(mirror.name, cfg.lanes_of(mirror), [(r.source_topic, r.target_topic, r.partitions)
                                                              for r in routes]):
        if lane.partitions:
            copy_lane(cfg, mirror, lane.index, list(lane.partitions), epoch_seconds)
    return routes


def close_kept_lanes() -> None:
    """Close the lane clients this process keeps between epochs (copying/sessions.py): a test's end."""
    from sparkmirror.copying import sessions

    for s in list(sessions._SESSIONS.values()):
        kept = s.release()
        if kept is not None:
            kept.close_clients()
    sessions._SESSIONS.clear()


def numbered_sequences(bootstrap: str, topic: str) -> dict[int, list[int]]:
    """Per partition, the sequence numbers of `produce_numbered` records, in the order the topic holds them."""
    return {p: [int(r.value.split(b":")[1]) for r in rs] for p, rs in read_topic(bootstrap, topic).items()}


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "x"})
    try:
        md = c.list_topics(topic, timeout=30).topics[topic]
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in md.partitions}
    finally:
        c.close()


@pytest.fixture
def flowgroup(kafka_a, kafka_b, request) -> Callable[..., FlowGroupConfig]:
    """flowgroup(topics_regex, **overrides): a one-mirror flow group a -> b with its own progress topic."""

    def make(topics: str, **kw) -> FlowGroupConfig:
        mirror = {"name": kw.pop("mirror_name", "a-to-b"), "source": "a", "target": "b", "topics": topics,
                  **kw.pop("mirror", {})}
        doc = {"name": kw.pop("name", unique_name("fg")),
               "clusters": [{"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                            {"alias": "b", "bootstrapServers": kafka_b.bootstrap}],
               "mirrors": [mirror], "lanes": 2, "epochSeconds": 3, "commitIntervalMs": 100,
               "progressTopic": unique_name("progress"), **kw}
        return FlowGroupConfig.model_validate(doc)

    return make


class JobProcess:
    """The mirror job as a subprocess in its own process group (so a kill reaches the JVM and Python workers)."""

    def __init__(self, config: FlowGroupConfig, workdir, master: str = "local[2,4]",
                 cmd: list[str] | None = None, env: dict | None = None) -> None:
        import os
        import subprocess
        import sys

        self.config_path = workdir / f"{config.name}.yaml"
        self.config_path.write_text(config.to_yaml())
        self.log_path = workdir / f"{config.name}.log"
        self.checkpoint = workdir / "checkpoint"
        base = cmd or [sys.executable, "-m", "sparkmirror.job"]
        self.cmd = [*base, "--config", str(self.config_path), "--checkpoint", str(self.checkpoint)]
        if cmd is None:
            self.cmd += ["--master", master, "--conf", "spark.driver.memory=512m", "--conf", "spark.ui.enabled=false"]
        # the driver writes its pid here once it handles SIGTERM (the contract of the image's launcher): a stop
        # sent before then would kill a driver still starting rather than drain it
        self.pidfile = workdir / f"{config.name}.pid"
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
               "SPARKMIRROR_DRIVER_PIDFILE": str(self.pidfile), **(env or {})}
        self.env = {k: v for k, v in env.items() if v is not None}  # `env`: a None value unsets the variable
        self.proc: subprocess.Popen | None = None
        self._subprocess = subprocess

    def start(self) -> "JobProcess":
        self.pidfile.unlink(missing_ok=True)
        out = open(self.log_path, "ab")
        self.proc = self._subprocess.Popen(self.cmd, stdout=out, stderr=self._subprocess.STDOUT,
                                           stdin=self._subprocess.DEVNULL, env=self.env, start_new_session=True)
        return self

    def kill(self, sig: int = 9) -> None:
        import os

        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            self.proc.wait(60)
        self._reap_group()

    def _reap_group(self) -> None:
        """SIGKILL whatever is left in the job's process group (daemon workers outlive the driver)."""
        import os

        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, timeout: float = 90) -> int | None:
        """SIGTERM to the driver process only (the JVM must stay up while the driver stops its queries)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._wait_handling_sigterm(timeout)
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except self._subprocess.TimeoutExpired:
                pass
        rc = self.proc.poll()
        self.kill(9)
        return rc

    def _wait_handling_sigterm(self, timeout: float) -> None:
        """Until the driver says it handles SIGTERM (a job whose target was already caught up by an earlier run can
        be stopped while Python still imports Spark: the signal's default action would end it with -15)."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if self.pidfile.read_text().strip() == str(self.proc.pid):
                    return
            except OSError:
                pass
            time.sleep(0.1)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def group_pids(self) -> list[int]:
        import psutil

        if self.proc is None:
            return []
        out = []
        for p in psutil.process_iter(["pid"]):
            try:
                if os_getpgid(p.pid) == self.proc.pid:
                    out.append(p.pid)
            except Exception:  # noqa: BLE001
                pass
        return out

    def jvm_command_line(self) -> list[str]:
        """The command line of the job's Spark JVM (the java process of its group), empty before it runs."""
        import psutil

        for pid in self.group_pids():
            try:
                cmd = psutil.Process(pid).cmdline()
            except psutil.Error:
                continue
            if cmd and cmd[0].endswith("java"):
                return cmd
        return []


def os_getpgid(pid: int) -> int:
    import os

    return os.getpgid(pid)


@pytest.fixture
def job(tmp_path):
    """job(config, **kw) -> a started JobProcess; every one is killed (process group) at the end of the test."""
    started: list[JobProcess] = []

    def make(config: FlowGroupConfig, **kw) -> JobProcess:
        jp = JobProcess(config, tmp_path, **kw).start()
        started.append(jp)
        return jp

    yield make
    for jp in started:
        jp.kill(9)
