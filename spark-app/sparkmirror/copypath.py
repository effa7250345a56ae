"""Which copy path a mirror's lanes take (`copy: records | batches`), and why when it is not the one asked for.
Pure: read by the lanes (copying/batchlane.py), by `plan` (preview.py) and by the metrics (exposition.py), so all
three say the same."""
from __future__ import annotations

from typing import NamedTuple

from .replication import RecordStamper, policy_for
from .resource.flowgroup import CopyPath, FlowGroupConfig, Mirror

IDENTITY_POLICY = "identity_policy"
CLIENT_SETTINGS = "client_settings"


class CopyChoice(NamedTuple):
    path: CopyPath
    why: str
    """Why the lanes copy records where batches were asked for or were the default ("" when they take the path
    the resource gave)."""
    fallback: str
    """The same as a metric label: "", IDENTITY_POLICY or CLIENT_SETTINGS."""


def copy_path_of(config: FlowGroupConfig, mirror: Mirror) -> CopyChoice:
    """The path `mirror`'s lanes take, and why when it is not `config.copy`."""
    if CopyPath(config.copy_path) != CopyPath.BATCHES:
        if config.copyFallback:  # the resource left `copy` to its default; plan.py chose records, saying why
            return CopyChoice(CopyPath.RECORDS, config.copyFallback, CLIENT_SETTINGS)
        return CopyChoice(CopyPath.RECORDS, "", "")
    stamper = RecordStamper.of(policy_for(mirror), mirror.source, mirror.target)
    if stamper.uses_provenance:
        return CopyChoice(CopyPath.RECORDS, "the identity replication policy writes provenance headers into every "
                                            "record, so its batches cannot go as they are: it copies records",
                          IDENTITY_POLICY)
    return CopyChoice(CopyPath.BATCHES, "", "")
