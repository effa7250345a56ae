"""The code a benchmark measures: git asked once, in one place, for every results file (`commit` stamps)."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def git(*args: str, repo: Path = REPO) -> str:
    """git's output in `repo`, stripped; "" when git fails or is missing (a results file still gets written)."""
    try:
        res = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return res.stdout.strip() if res.returncode == 0 else ""


def commit(repo: Path = REPO) -> dict:
    """HEAD at run time and whether the tree had uncommitted changes."""
    return {"sha": git("rev-parse", "HEAD", repo=repo) or None,
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no", repo=repo))}


def uncommitted(*paths: str, repo: Path = REPO) -> list[str]:
    """The files under `paths` that differ from HEAD (the run measures code that is not a commit)."""
    return [ln.split(maxsplit=1)[-1] for ln in git("status", "--porcelain", "--", *paths, repo=repo).splitlines()
            if ln.strip()]
