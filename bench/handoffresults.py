"""`bench/results/handoff.json`: the handoff figures of each path (`kind`, `local`), each kept when the other is
written, with the commit they were measured at (so a figure is never read against code it did not run)."""
from __future__ import annotations

import json
import time
from pathlib import Path

from .gitstate import commit

FILE = "handoff.json"


def merge(doc: dict, path: str, figures: dict, at: dict) -> dict:
    """`doc` with `path`'s figures replaced (stamped with `at` and the time); the other paths untouched."""
    out = {k: v for k, v in doc.items()}
    out[path] = {**figures, "commit": at, "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return out


def write(results: Path, path: str, figures: dict, repo: Path, at: dict | None = None) -> Path:
    """`path`'s figures into the file, stamped with `at` (the commit taken when the run began) or HEAD now."""
    results.mkdir(parents=True, exist_ok=True)
    target = results / FILE
    doc = json.loads(target.read_text()) if target.exists() else {}
    target.write_text(json.dumps(merge(doc, path, figures, at or commit(repo)), indent=2, default=str) + "\n")
    return target
