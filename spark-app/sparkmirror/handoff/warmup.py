"""A standby generation's warm-up: everything a first epoch would otherwise wait for, done before the handoff."""
from __future__ import annotations

import logging
import time

from ..resource.flowgroup import FlowGroupConfig

log = logging.getLogger(__name__)


def _warm_worker(_i: int) -> int:
    """Runs in an executor's Python worker: load what a lane task loads (Spark reuses the worker)."""
    import confluent_kafka  # noqa: F401

    from sparkmirror import datasource  # noqa: F401
    from sparkmirror.copying import loop  # noqa: F401

    return 1


def warm_up(spark, configs: list[FlowGroupConfig], timeout: float = 60.0) -> float:
    """Executors and Python workers up (one task per lane), every cluster answering, the progress topics and
    remote topics in place (TopicSync, idempotent). Returns the seconds it took; raises when a cluster does not
    answer, so the generation never reports ready."""
    from confluent_kafka.admin import AdminClient

    from ..progress import ensure_progress_topic
    from ..topicsync import TopicSync

    t0 = time.monotonic()
    tasks = max(1, sum(c.lanes_of(m) for c in configs for m in c.mirrors))
    spark.sparkContext.parallelize(range(tasks), tasks).map(_warm_worker).sum()
    for cfg in configs:
        for c in cfg.clusters:
            AdminClient(c.client_config()).list_topics(timeout=timeout)
        for m in cfg.mirrors:
            ensure_progress_topic(cfg.cluster(m.target).client_config(), cfg.progressTopic)
            TopicSync(cfg, m).sync()
    took = time.monotonic() - t0
    log.info("standby: warmed up in %.1f s (%d tasks)", took, tasks)
    return took
