"""One flow group's worker generation inside a driver (driver.py): its config, services and queries, and the go
and drain files its queries' planning looks at. A file, not a flag, because the planning runs in the query's own
thread and must see the change the moment the handoff makes it."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .resource.flowgroup import FlowGroupConfig


@dataclass
class FlowGroupRun:
    """One flow group's worker generation in this driver: its config, services and queries, and the two files
    its queries' planning looks at (see `start_queries`): go (taken over) and drain (stop planning)."""

    config: FlowGroupConfig
    services: object
    queries: list = field(default_factory=list)
    files: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="sparkmirror-gen-")))
    checkpoint_root: str = ""
    taken_back: int = 0  # the marks say this generation took the group back from that one (handoff/takeback.py)

    @property
    def go_file(self) -> str:
        return str(self.files / "go")

    @property
    def drain_file(self) -> str:
        return str(self.files / "drain")

    @property
    def copying(self) -> bool:
        """Whether this generation's lanes may hold their ids: it took the flow group over here, or its go mark
        is on the progress topic (a restarted generation's lanes start on it while the driver is in standby).
        A generation in standby that never took over must not fence: the ids may be the active one's."""
        return Path(self.go_file).exists() or bool(self.services is not None and self.services.marked_go())

    def go(self) -> None:
        Path(self.go_file).touch()

    def stop_planning(self) -> None:
        Path(self.drain_file).touch()

    def resume_planning(self) -> None:
        """A hot spare that took its flow group back (handoff/spare.py): its queries plan epochs again."""
        Path(self.drain_file).unlink(missing_ok=True)
