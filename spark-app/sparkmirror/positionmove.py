"""One partition of a group moved to the target, as failover, failback and the share-group rounds report it."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class PartitionMove:
    """Where a group's position on a source partition translates to on the target and what was done with it
    (the action words are the reporting module's)."""

    group: str
    source_topic: str
    target_topic: str
    partition: int
    source_offset: int
    target_offset: int | None
    action: str
    detail: str = ""

    def as_dict(self) -> dict:
        return {k[0] + k.title().replace("_", "")[1:]: v for k, v in asdict(self).items()}
