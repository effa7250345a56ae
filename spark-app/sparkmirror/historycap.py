"""The driver's side of the offset history's budget (`historybudget.py` is the rule): the figures it needs,
gathered once at start (driver memory from the session's conf, the bytes a range costs measured here, the
source partitions the driver's mirrors serve, read from each source), the cap logged and returned."""
from __future__ import annotations

import logging

from confluent_kafka.admin import AdminClient

from .historybudget import HistoryBudget, size_history
from .progress.footprint import bytes_per_range
from .replication import policy_for
from .resource.flowgroup import FlowGroupConfig
from .topicplan import select_topics, topic_filter

log = logging.getLogger("sparkmirror.history")
DEFAULT_DRIVER_MEMORY = "1g"  # Spark's own default of spark.driver.memory


def source_partitions(configs: list[FlowGroupConfig], timeout: float = 15.0) -> int | None:
    """Source partitions the mirrors of `configs` copy now (None: a source did not answer)."""
    total = 0
    for cfg in configs:
        for mirror in cfg.mirrors:
            admin = AdminClient(cfg.cluster(mirror.source).client_config())
            try:
                md = admin.list_topics(timeout=timeout)
            except Exception as e:  # noqa: BLE001 - unreachable source: the budget cannot be checked now
                log.warning("offset history: source %s did not answer (%s): not sized", mirror.source, e)
                return None
            counts = {n: len(t.partitions) for n, t in md.topics.items() if t.error is None}
            total += sum(counts[t] for t in select_topics(policy_for(mirror), topic_filter(cfg, mirror), counts,
                                                          mirror.target))
    return total


def size_driver_history(configs: list[FlowGroupConfig], driver_memory: str | None) -> HistoryBudget | None:
    """The cap for every flow group of this driver, logged; `HistoryTooLarge` when the configuration cannot fit;
    None when the sources could not be asked (the configured cap, or MAX_HISTORY, stays)."""
    partitions = source_partitions(configs)
    if partitions is None:
        return None
    requested = [c.offsetHistory for c in configs if c.offsetHistory is not None]
    budget = size_history(driver_memory or DEFAULT_DRIVER_MEMORY, max(partitions, 1), bytes_per_range(),
                          max(requested) if requested else None)
    log.info("%s", budget.describe())
    return budget
