"""When kept clients may go on with a lane's next epoch: the same lane and config, and a plan that keeps every
partition they copied (shared by sessions.py, in this worker, and delegate.py, across workers)."""
from __future__ import annotations

import hashlib

from ..resource.flowgroup import FlowGroupConfig
from .shares import PartitionKey


def session_key(tid: str, config: FlowGroupConfig, credentials: str) -> tuple:
    """What must not have changed for kept clients to be resumed: the lane, the config and the secrets the
    clients were made with (`credentials`, a fingerprint: a Secret replaced since makes the lane's next epoch
    start afresh, its new producer fencing the kept one). The plan may have grown (`grows`)."""
    return (tid, config.model_dump_json(), credentials)


def plan_key(tid: str, config: FlowGroupConfig, credentials: str) -> str:
    """What a task and the keeping worker must agree on (`session_key`, hashed); the task's partitions travel
    with its request and must include the kept ones (`grows`)."""
    return hashlib.sha256(repr(session_key(tid, config, credentials)).encode()).hexdigest()


def grows(kept: dict[PartitionKey, str], planned: dict[PartitionKey, str]) -> bool:
    """Does the planned route keep every partition of the kept one, to the same remote topic? Then the kept
    clients go on and only the added partitions start from the progress topic (growth.py): a lane that gained a
    topic started afresh, 2-35 s at 500-5,000 partitions (bench/scale), and the new topic with it. Partitions
    never move between lanes while the config stays (lanes.lane_of), so an added one had no other copier since
    the kept producer fenced the lane's older ones."""
    return len(planned) >= len(kept) and all(planned.get(k) == v for k, v in kept.items())
