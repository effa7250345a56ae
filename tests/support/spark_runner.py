"""Test support (not product): plays the Kubeflow Spark operator and the kubelet for SparkApplications.

It polls the SparkApplications of one namespace on the local API server; for each one it reads the flow-group
ConfigMap the application mounts, runs the job (`python -m sparkmirror.job --config FILE`) as a local Spark
process against the local Kafka clusters, and writes `.status.applicationState` back as the Spark operator
would: SUBMITTED, RUNNING, FAILING / FAILED (with the error in the Spark operator's words, which are only the driver
container's terminated state: `driver container failed with ExitCode: N, Reason: Error`, never the driver's
log), SUSPENDED (spec.suspend). A changed spec restarts the job; a deleted application
stops it; a job that exits 0 (a worker generation that handed over) is COMPLETED and never run again.
`restartPolicy` as the Spark operator reads it: `Always` resubmits any exit; `OnFailure` resubmits a failed
one `onFailureRetryInterval x attempts` seconds later (its linear back-off), up to `onFailureRetries` times,
then it stays FAILED. Processes are this runner's own children and are stopped by their pid.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes.client import ApiException

from sparkmirror.resource.names import SUBMISSION_LABEL
from sparkmirror_operator.kubeapi import KubeApi

log = logging.getLogger(__name__)
CONFIG_MOUNT = "/etc/sparkmirror/flowgroup/"


def master_of(spec: dict) -> str:
    """A local master with the task slots the application's executors would give on Kubernetes."""
    executor = spec.get("executor") or {}
    return f"local[{max(1, int(executor.get('instances', 1)) * int(executor.get('cores', 1)))}]"


def failed_driver_message(rc: int) -> str:
    """The Kubeflow Spark operator's `applicationState.errorMessage` of a failed driver: built from the driver
    container's terminated state alone (its controller's `driver container failed with ExitCode: %d, Reason: %s`),
    so nothing the driver printed reaches it. A process ended by signal N is the kubelet's exit code 128 + N; the
    kubelet's reason for a non-zero exit is `Error` (`OOMKilled` needs a memory cgroup this runner does not have)."""
    code = 128 - rc if rc < 0 else rc
    return f"driver container failed with ExitCode: {code}, Reason: Error"


@dataclass
class Job:
    name: str
    spec_hash: str
    proc: subprocess.Popen
    log_path: Path
    started: float
    reported: str = ""
    ended: float | None = None


class LocalSparkRunner:
    def __init__(self, api: KubeApi, namespace: str, workdir: Path, *, running_after: float = 3.0,
                 master: str | None = None, missing_images: frozenset[str] = frozenset()) -> None:
        """master: Spark's master for every job; None: `local[N]` with N the task slots the application's
        executors give on Kubernetes (instances x cores), so lanes take turns here exactly when they would
        there. missing_images: images no registry has; as with a kubelet, their driver pod never starts (the
        Spark operator keeps the application SUBMITTED)."""
        self.api, self.namespace, self.workdir = api, namespace, workdir
        self.running_after, self.master = running_after, master
        self.missing_images = missing_images
        self.jobs: dict[str, Job] = {}
        self.submissions: dict[str, str] = {}  # application name -> its current submission id
        self.attempts: dict[str, int] = {}  # application uid -> runs so far (the Spark operator's executionAttempts)
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name=f"spark-runner-{namespace}", daemon=True)
        self.errors: list[str] = []

    # ---- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> "LocalSparkRunner":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)
        for name in list(self.jobs):
            self._kill(name)

    def __enter__(self) -> "LocalSparkRunner":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- the control loop -----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._sync()
            except Exception as e:  # noqa: BLE001 - keep playing the operator; tests read .errors
                log.exception("runner sync failed")
                self.errors.append(repr(e))
            self.stop_event.wait(0.5)

    def _sync(self) -> None:
        apps = {a["metadata"]["name"]: a for a in self.api.list("SparkApplication", self.namespace)}
        for name in list(self.jobs):
            if name not in apps:
                self._kill(name)
        for name, app in apps.items():
            spec = app["spec"]
            spec_hash = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
            job = self.jobs.get(name)
            if spec.get("suspend"):
                if job is not None:
                    self._kill(name)
                self._state(app, "SUSPENDED")
                continue
            if job is not None and job.spec_hash != spec_hash:
                self._kill(name)
                job = None
            if job is None:
                job = self._submit(app, spec_hash)
                if job is None:
                    continue
            rc = job.proc.poll()
            if rc is not None:
                job.ended = job.ended or time.monotonic()
                policy = spec.get("restartPolicy") or {}
                attempts = self.attempts.get(app["metadata"].get("uid", name), 1)
                retry = policy.get("type") == "Always" or (
                    rc != 0 and policy.get("type") == "OnFailure" and attempts <= policy.get("onFailureRetries", 0))
                if rc == 0:  # e.g. a worker generation that handed over and drained
                    self._state(app, "COMPLETED")
                else:
                    self._state(app, "FAILING" if retry else "FAILED", failed_driver_message(rc))
                due = job.ended + (policy.get("onFailureRetryInterval", 0) * attempts if rc != 0 else 0)
                if retry and time.monotonic() >= due:  # submitted again on the next pass
                    del self.jobs[name]
            elif time.monotonic() - job.started >= self.running_after:
                self._state(app, "RUNNING")

    def _submit(self, app: dict, spec_hash: str) -> Job | None:
        name, spec = app["metadata"]["name"], app["spec"]
        if spec.get("image") in self.missing_images:
            self._state(app, "SUBMITTED")  # the driver pod waits for its image (ErrImagePull) forever
            return None
        args = list(spec.get("arguments") or [])
        config_path = args[args.index("--config") + 1]
        # the driver pod as Spark makes it: from its pod template (volumes and the driver container's mounts)
        pod = spec["driver"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes") or []}
        container = next(c for c in pod["containers"] if c["name"] == "spark-kubernetes-driver")
        mount = next(m for m in container["volumeMounts"] if config_path.startswith(m["mountPath"] + "/"))
        cm_name = volumes[mount["name"]]["configMap"]["name"]
        cm = self.api.get("ConfigMap", self.namespace, cm_name)
        if cm is None:
            self._state(app, "SUBMISSION_FAILED", f"ConfigMap {cm_name} not found")
            return None
        key = config_path[len(mount["mountPath"]) + 1:]
        cfg = yaml.safe_load(cm["data"][key])
        cfg["metricsPort"] = 0  # many "pods" share this host's loopback: any free port
        local_config = self.workdir / f"{name}.yaml"
        local_config.write_text(yaml.safe_dump(cfg, sort_keys=False))
        log_path = self.workdir / f"{name}.log"
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONUNBUFFERED": "1"}
        # a new submission id per (re)submission, as the Spark operator's `status.submissionID`, handed to the
        # driver the way its pod gets it: env vars whose downward-API fieldRef reads the submission-id label
        submission = str(uuid.uuid4())
        self.submissions[name] = submission
        for var in container.get("env") or []:
            if ((var.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == \
                    f"metadata.labels['{SUBMISSION_LABEL}']":
                env[var["name"]] = submission
        cmd = [sys.executable, "-m", "sparkmirror.job", "--config", str(local_config), "--master", self.master or master_of(spec),
               "--checkpoint", str(self.workdir / "checkpoints" / name),
               "--conf", "spark.driver.memory=512m", "--conf", "spark.ui.enabled=false",
               "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.driver.host=127.0.0.1"]
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        job = Job(name, spec_hash, proc, log_path, time.monotonic())
        self.jobs[name] = job
        uid = app["metadata"].get("uid", name)
        self.attempts[uid] = self.attempts.get(uid, 0) + 1
        self._state(app, "SUBMITTED")
        return job

    def _kill(self, name: str) -> None:
        """Stop a job; it leaves `jobs` only once its process has ended (a draining job still copies)."""
        job = self.jobs.get(name)
        if job is None:
            return
        try:
            if job.proc.poll() is not None:
                return
            os.killpg(job.proc.pid, signal.SIGTERM)  # the job's own session: this child and its JVM only
            try:
                job.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(job.proc.pid, signal.SIGKILL)
                job.proc.wait(10)
        finally:
            self.jobs.pop(name, None)

    def _state(self, app: dict, state: str, error: str | None = None) -> None:
        current = ((app.get("status") or {}).get("applicationState") or {})
        submission = self.submissions.get(app["metadata"]["name"])
        if current.get("state") == state and current.get("errorMessage") == error and \
                (app.get("status") or {}).get("submissionID") == submission:
            return
        status = {"applicationState": {"state": state, **({"errorMessage": error} if error else {})},
                  "driverInfo": {"podName": f"{app['metadata']['name']}-driver"}}
        if submission:
            status["submissionID"] = submission
        try:
            self.api.patch_status("SparkApplication", self.namespace, app["metadata"]["name"], status)
        except ApiException as e:
            if e.status == 404:  # deleted since it was listed (e.g. a generation pruned): the next pass stops it
                return
            raise
        app.setdefault("status", {}).update(status)
