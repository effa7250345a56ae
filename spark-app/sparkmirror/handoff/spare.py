"""A generation that lost the Lease stays a hot spare until its successor committed its first epoch.

The moment the Lease names a later generation, the driver plans no new epoch (`FlowGroupRun.stop_planning`);
here it lets the running epoch end, then waits with its queries up, copying nothing and planning nothing:
- the successor reported `took-over` (its first epoch committed) on every Lease of this driver: exit 0; where
  its reports land on other Leases (a split), the operator removes this generation's application instead, and
  the stop signal ends it the same way;
- the operator moved the Lease back (the successor failed or timed out before that): take the flow groups back
  (`takeback.take_back`: revoke the successor's marks, fence its lanes and this generation's own, go) and plan
  epochs again. The queries were never stopped, so copying resumes within a planning round.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)


def wait_for_epochs(queries: list, timeout: float) -> bool:
    """Until no query runs an epoch (the last one committed), at most `timeout` seconds; False at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not any(q.isActive and (q.status.get("isTriggerActive") or q.status.get("isDataAvailable"))
                       for q in queries):
                return True
        except Exception:  # noqa: BLE001 - py4j: the JVM went away, nothing runs
            return True
        time.sleep(0.5)
    return False


def serve_as_spare(driver: Any, stopping: threading.Event) -> bool:
    """Run `driver` (a `sparkmirror.driver.Driver` whose Lease just named a later generation) as a hot spare.
    True: it took its flow groups back and copies again (the Lease watch restarted); False: it should stop (the
    successor took over, or `stopping`)."""
    from confluent_kafka import KafkaException

    from .takeback import take_back
    from .takeover import HandoffError

    lease = driver.lease
    successor = lease.successor
    t_lost = time.monotonic()
    epoch = max(c.epochSeconds for c in driver.configs)
    done = wait_for_epochs(driver.queries, epoch + 30)
    log.info("the Lease names worker generation %d now: a hot spare until it committed its first epoch (this "
             "generation's last epoch %s in %.1f s)", successor, "ended" if done else "still runs",
             time.monotonic() - t_lost)
    verdict, revoked = lease.wait_as_spare(successor, stopping)
    if verdict != "back":
        if verdict == "over":
            log.info("worker generation %d committed its first epoch: this generation exits", successor)
        return False
    t0 = time.monotonic()
    for run in driver.groups.values():
        while True:  # a target that does not answer now is waited out: nothing else copies this flow group
            try:
                take_back(run.config, successor, revoked)
                break
            except (HandoffError, KafkaException, TimeoutError) as e:
                log.warning("taking flow group %s back: %s; trying again", run.config.name, e)
                if stopping.wait(2.0):
                    return False
    for run in driver.groups.values():
        run.resume_planning()
    lease.taken_back.update({successor, *(r.generation for r in revoked)})
    lease.successor = None
    driver.lost.clear()
    driver.watch_lease()
    log.info("the Lease names this generation again (generation %d of %s rolled back): took the flow groups back "
             "in %d ms, %.1f s after it turned hot spare; copying", successor,
             ", ".join(sorted({g for r in revoked for g in r.flow_groups})) or "-", (time.monotonic() - t0) * 1000,
             time.monotonic() - t_lost)
    return True
