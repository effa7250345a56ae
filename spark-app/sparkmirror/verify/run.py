"""The verify job's driver: progress topic -> ranges -> one Spark task per range -> the rows of the report.

It runs on the same Spark as the mirror (`queries.spark_session`: a local master, `--master`, or spark-submit's).
Records never cross into the JVM: tasks read both clusters with confluent-kafka and return one small row each.
"""
from __future__ import annotations

from ..progress import read_progress
from ..replication import policy_for
from ..resource.flowgroup import FlowGroupConfig
from .ranges import DEFAULT_RANGE_RECORDS, VerifyRange, plan_ranges


def committed_ranges(configs: list[FlowGroupConfig], range_records: int = DEFAULT_RANGE_RECORDS,
                     timeout: float = 60.0) -> list[VerifyRange]:
    """Every mirror's committed ranges, as the progress topic on its target holds them now. A mirror whose topics
    several flow groups share (same progress topic) is planned once."""
    out: list[VerifyRange] = []
    seen: set[tuple] = set()
    for cfg in configs:
        for m in cfg.mirrors:
            key = (cfg.resource, cfg.cluster(m.target).bootstrapServers, cfg.progressTopic, m.source, m.name)
            if key in seen:
                continue
            seen.add(key)
            state = read_progress(cfg.cluster(m.target).client_config(), cfg.progressTopic, m.source,
                                  timeout=timeout, resource=cfg.resource)
            for (_cluster, _topic, _partition), omap in sorted(state.maps.items()):
                records = [r for r in omap.records if r.mirror in ("", m.name)]
                out += plan_ranges(cfg.name, m.name, m.target, records, range_records)
    return out


def _task(arg: tuple[dict, dict[str, str], dict[str, str], bool, list | None]) -> dict:
    from .compare import check_range

    return check_range(*arg)


def verify(spark, configs: list[FlowGroupConfig], ranges: list[VerifyRange]) -> list[dict]:
    """Compare every range in a Spark job (one task per range); rows in the order of `ranges`."""
    if not ranges:
        return []
    by_mirror = {(c.name, m.name): (c.cluster(m.source).client_config(), c.cluster(m.target).client_config(),
                                    policy_for(m).uses_provenance, m.transforms) for c in configs for m in c.mirrors}
    tasks = [(r.as_dict(), *by_mirror[(r.flow_group, r.mirror)]) for r in ranges]
    sc = spark.sparkContext
    sc.setJobDescription(f"sparkmirror verify: {len(tasks)} ranges")
    return sc.parallelize(tasks, len(tasks)).map(_task).collect()
