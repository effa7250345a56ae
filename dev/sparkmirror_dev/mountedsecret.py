"""A Kubernetes Secret as the kubelet mounts it, for tests and campaigns that replace one while a mirror reads it."""
from __future__ import annotations

import os
from pathlib import Path


class MountedSecret:
    """A Secret's keys as the kubelet mounts them: `name -> ..data/name`, `..data` a symlink to a directory of the
    current contents, swapped in one rename, so a reader never sees a new certificate beside an old key."""

    def __init__(self, d: Path, files: dict[str, bytes]) -> None:
        self.dir, self.version = d, 0
        d.mkdir()
        self.update(files)
        for name in files:
            os.symlink(f"..data/{name}", d / name)

    def update(self, files: dict[str, bytes]) -> None:
        self.version += 1
        data = self.dir / f"..v{self.version}"
        data.mkdir()
        for name, content in files.items():
            (data / name).write_bytes(content)
        tmp = self.dir / "..data_tmp"
        os.symlink(data.name, tmp)
        os.replace(tmp, self.dir / "..data")

    def path(self, name: str) -> str:
        return str(self.dir / name)
