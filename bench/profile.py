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


def _proc(frame: str) -> str:
    """'process 123:"python -m pyspark.daemon pyspark.worker"' -> a short name for the kind of process."""
    cmd = re.sub(r"^process \d+:", "", frame).strip('"')
    for marker, name in (("pyspark.daemon", "pyspark worker (lane tasks)"),
                         ("python_streaming_source_runner", "streaming source runner (planning)"),
                         ("plan_data_source_read", "data source planner"),
                         ("sparkmirror.job", "driver (python)")):
        if marker in cmd:
            return name
    return cmd[:60]


def summarize(path: Path, top: int = 15) -> dict:
    """Samples per process, the functions with the most samples on top of the stack (self) and anywhere on
    it (inclusive, once per stack). Only samples where Python was running (py-spy drops idle by default)."""
    if not path.exists():
        return {}
    by_line: Counter = Counter()
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
        # --subprocesses: the stack starts with the chain of processes, root first; the last one is the sampled
        procs = [f for f in stack if f.startswith("process ")]
        proc = _proc(procs[-1]) if procs else "?"
        by_proc[proc] += n
        frames = [_frame(f) for f in stack if f.strip() and not f.startswith("process ")]
        if frames:
            self_[frames[-1]] += n
        raw = [f.strip() for f in stack if f.strip() and not f.startswith("process ")]
        own = [f for f in raw if "sparkmirror/" in f]
        if own:  # the innermost line of sparkmirror's own code on the stack (C calls count to their caller)
            by_line[own[-1]] += n
        for f in set(frames):
            if "sparkmirror" in f or any(k in f for k in ("copying", "datasource", "progress", "lanes")) \
                    or f in {_frame(x) for x in own}:
                incl[f] += n
    pct = (lambda c: [(k, round(100.0 * v / total, 1)) for k, v in c.most_common(top)]) if total else (lambda c: [])
    return {"samples": total, "by_process": pct(by_proc), "self": pct(self_), "inclusive": pct(incl),
            "sparkmirror_lines": pct(by_line)}
