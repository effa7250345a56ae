"""Where sparkmirror's Python time goes: py-spy over the job's process tree during the copy, summarized."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path


def find_py_spy() -> str | None:
    for cand in (os.environ.get("PY_SPY"), shutil.which("py-spy"), str(Path(sys.executable).parent / "py-spy")):
        if cand and Path(cand).exists():
            return cand
    return None


class PySpy:
    """`py-spy record --subprocesses` on a process tree, raw (collapsed-stack) output; stop() flushes it."""

    def __init__(self, pid: int, out: Path, rate: int = 67) -> None:
        self.out = out
        exe = find_py_spy()
        if exe is None:
            raise FileNotFoundError("py-spy not found (pip install py-spy, or set PY_SPY)")
        self.proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--subprocesses", "--format", "raw",
                                      "--output", str(out), "--rate", str(rate), "--nonblocking"],
                                     stdout=open(out.with_suffix(".log"), "wb"), stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


_LINE = re.compile(r"^(.*) (\d+)$")


def _frame(f: str) -> str:
    """'func (path/to/file.py:123)' -> 'func (file.py)'."""
    m = re.match(r"^(.*?) \((.*?)(?::\d+)?\)$", f.strip())
    if not m:
        return f.strip()
    return f"{m.group(1)} ({Path(m.group(2)).name})"


def summarize(path: Path, top: int = 15) -> dict:
    """Samples per process, the functions with the most samples on top of the stack (self) and anywhere on
    it (inclusive, once per stack). Only samples where Python was running (py-spy drops idle by default)."""
    if not path.exists():
        return {}
    by_proc: Counter = Counter()
    self_: Counter = Counter()
    incl: Counter = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        stack, n = m.group(1).split(";"), int(m.group(2))
        total += n
        proc = "?"
        if stack and stack[0].startswith("process "):
            proc = re.sub(r"^process \d+:", "", stack[0]).strip('"')[:80]
            stack = stack[1:]
        by_proc[proc] += n
        frames = [_frame(f) for f in stack if f.strip()]
        if frames:
            self_[frames[-1]] += n
        for f in set(frames):
            incl[f] += n
    pct = (lambda c: [(k, round(100.0 * v / total, 1)) for k, v in c.most_common(top)]) if total else (lambda c: [])
    return {"samples": total, "by_process": pct(by_proc), "self": pct(self_), "inclusive": pct(incl)}
