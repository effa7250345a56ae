"""A lane of a worker generation in standby: its task runs, its clients are made, it copies nothing until its
generation took the flow group over (the "go" generation mark on the progress topic, see handoff/takeover.py).

The mark, not a file or the Lease, because executors see neither the driver's files nor (without rights) the
Lease, and they read the progress topic anyway: waiting on it costs one consumer, and the lane starts within a
fetch of the mark being written, instead of Spark planning and launching a new epoch after the handoff.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from ..progress import ProgressReader
from .errors import transient_reason
from ..resource.flowgroup import FlowGroupConfig, Mirror

log = logging.getLogger(__name__)


def wait_for_go(config: FlowGroupConfig, mirror: Mirror, tid: str, should_stop: Callable[[], bool]) -> bool:
    """Block until this lane's generation may copy (True), or a later one took over or `should_stop()` (False).

    A target that does not answer (restarting, or a loaded broker slower than a metadata request may take) is
    waited out, said once: the reader is made afresh then, since a batch it was applying when the error came is
    consumed but not applied, and a mark in it would be missed."""
    target_conf = config.cluster(mirror.target).client_config()
    t0 = time.monotonic()
    reader: ProgressReader | None = None
    state = None
    waiting = False  # the target did not answer the last read
    try:
        while True:
            if should_stop():
                return False
            try:
                if reader is None:
                    reader = ProgressReader(target_conf, config.progressTopic, mirror.source, source_partitions=[],
                                            purpose="standby", resource=config.resource)
                    state = reader.read_to_end()
                else:
                    reader.poll(0.2)  # short: the lane checks the marks after every fetch, not once a second
            except (KafkaException, TimeoutError) as e:
                why = transient_reason(e)
                if why is None:
                    raise
                if not waiting:
                    log.warning("lane %s: in standby, the target did not answer (%s); waiting", tid, why)
                waiting = True
                if reader is not None:
                    reader.close()
                    reader = None
                time.sleep(0.5)
                continue
            if waiting:
                log.warning("lane %s: in standby, the target answers again", tid)
            waiting = False
            assert state is not None
            verdict = state.may_copy(config.resource, config.resourceUid, config.name, config.worker.generation)
            if verdict is not None:
                log.info("lane %s: %s after %.1f s in standby", tid,
                         "taken over, copying" if verdict else "a later generation took over", time.monotonic() - t0)
                return verdict
    finally:
        if reader is not None:
            reader.close()
