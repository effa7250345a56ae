"""Which copy path a mirror's lanes take (`copy: records | batches`), and why when it is not the one asked for.
Pure: read by the lanes (copying/batchlane.py) and by `plan` (preview.py), so both say the same."""
from __future__ import annotations

from .replication import RecordStamper, policy_for
from .resource.flowgroup import CopyPath, FlowGroupConfig, Mirror


def copy_path_of(config: FlowGroupConfig, mirror: Mirror) -> tuple[CopyPath, str]:
    """The path `mirror`'s lanes take, and why when it is not `config.copy` ("" when it is)."""
    if CopyPath(config.copy_path) != CopyPath.BATCHES:
        return CopyPath.RECORDS, ""
    stamper = RecordStamper.of(policy_for(mirror), mirror.source, mirror.target)
    if stamper.uses_provenance:
        return CopyPath.RECORDS, ("the identity replication policy writes provenance headers into every record, "
                                  "so its batches cannot go as they are: it copies records")
    return CopyPath.BATCHES, ""
