"""A lane's epoch run by the Python worker that keeps the lane's clients, when Spark starts the task in another.

An executor hands a task to whichever of its Python workers went idle first, so a lane's next task lands in a
worker other than the one keeping its clients (sessions.py) about every other epoch. Starting afresh there
costs one to two seconds (producers, init_transactions fencing the kept copy, the progress read) in which the
lane copies nothing, and that stall was most of the mirror's p99 latency. Instead, the task asks the keeping
worker to run the epoch with its clients, waits, and yields the summaries it gets back as its own.

The workers of a host meet in a directory they share (`lane_dir()`), one set of files per lane:
- `<lane>.holder`: the worker keeping the lane's clients (pid, the epoch it ran, the key of its plan);
- `<lane>.req`: a task's request (its epoch, the epoch before it, the key, when its epoch ends);
- the keeping worker renames the request to `<lane>.accepted` or `<lane>.refused`; a task that got no answer
  renames it to `<lane>.withdrawn`. One rename wins, so a request is either served or withdrawn, never both;
- `<lane>.stop`: the task was told to stop (its route watch); `<lane>.result`: the summaries, or the error.

Exactly-once does not rest on this: a task that is refused, withdraws, or loses the keeping worker starts
afresh, and its init_transactions fences whatever the other worker still runs (see commit.py).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import CopyError
from .summary import PartitionSummary

if TYPE_CHECKING:
    from .loop import LaneCopier

log = logging.getLogger(__name__)

ANSWER_SECONDS = 2.0
"""How long a task waits for the keeping worker to take its request, beyond three commit intervals (the
keeping worker looks for requests between transactions)."""


def lane_dir() -> Path:
    """Where the Python workers of this host and user meet (not shared with other users)."""
    return Path(tempfile.gettempdir()) / f"sparkmirror-lanes-{os.getuid()}"


def plan_key(copier: LaneCopier) -> str:
    """What a task and the keeping worker must agree on: the lane, the config and the plan (sessions.key)."""
    from .sessions import session_key

    return hashlib.sha256(repr(session_key(copier)).encode()).hexdigest()


@dataclass(frozen=True)
class Request:
    epoch: int
    prev_epoch: int
    key: str
    deadline: float  # wall-clock seconds: when the task's epoch ends
    pid: int


class LaneFiles:
    """The files of one lane in `lane_dir()`."""

    def __init__(self, tid: str, root: Path | None = None) -> None:
        self.root = root or lane_dir()
        stem = hashlib.sha256(tid.encode()).hexdigest()[:24]
        for name in ("holder", "req", "accepted", "refused", "withdrawn", "stop", "result"):
            setattr(self, name, self.root / f"{stem}.{name}")
        self.holder: Path
        self.req: Path
        self.accepted: Path
        self.refused: Path
        self.withdrawn: Path
        self.stop: Path
        self.result: Path

    def write(self, path: Path, doc: dict) -> None:
        """Whole or not at all: readers never see half a file."""
        self.root.mkdir(mode=0o700, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)

    @staticmethod
    def read(path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    @staticmethod
    def drop(*paths: Path) -> None:
        for p in paths:
            try:
                p.unlink()
            except OSError:
                pass


def _started(pid: int) -> str | None:
    """The process' start time (clock ticks since boot) while it runs, None once it ended (a zombie too): a
    pid alone could be a new process, and a killed worker stays a zombie until its parent reaps it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X", "x") else fields[19]


def _alive(holder: dict) -> bool:
    return _started(int(holder["pid"])) == holder.get("started")


# ---- the keeping worker ------------------------------------------------------------------------------------

def announce(tid: str, epoch: int, key: str) -> None:
    """This worker keeps the lane's clients, having run `epoch`."""
    try:
        f = LaneFiles(tid)
        f.write(f.holder, {"pid": os.getpid(), "started": _started(os.getpid()), "epoch": epoch, "key": key})
    except OSError as e:  # nowhere to meet: tasks landing elsewhere start afresh, as without this module
        log.info("lane %s: cannot announce its kept clients (%s)", tid, e)


def retire(tid: str) -> None:
    """This worker no longer keeps the lane's clients (the file is left alone if another worker wrote it)."""
    f = LaneFiles(tid)
    doc = f.read(f.holder)
    if doc is not None and doc.get("pid") == os.getpid():
        f.drop(f.holder)


def asked(tid: str) -> bool:
    """A task elsewhere asks for the lane's next epoch (one stat: checked between transactions)."""
    return LaneFiles(tid).req.exists()


def take(tid: str, last_epoch: int, key: str) -> Request | None:
    """Accept the pending request when it follows the epoch these clients ran and plans the same lane; refuse
    it otherwise (the task starts afresh). None when refused or already withdrawn."""
    f = LaneFiles(tid)
    doc = f.read(f.req)
    if doc is None:
        return None
    req = Request(int(doc["epoch"]), int(doc["prev_epoch"]), str(doc["key"]), float(doc["deadline"]),
                  int(doc["pid"]))
    why = ("another plan" if req.key != key else
           f"these clients ran epoch {last_epoch}, the task follows {req.prev_epoch}"
           if req.prev_epoch != last_epoch else "")
    try:
        os.rename(f.req, f.refused if why else f.accepted)
    except OSError:  # withdrawn (or replaced) meanwhile
        return None
    if why:
        log.info("lane %s: not running epoch %d for worker %d: %s", tid, req.epoch, req.pid, why)
        return None
    return req


def stop_asked(tid: str) -> bool:
    return LaneFiles(tid).stop.exists()


def publish(tid: str, epoch: int, rows: list[PartitionSummary], error: str | None = None,
            failed: str | None = None) -> None:
    """The served epoch's summaries (and the CopyError that ended it, or why it could not run) for the task."""
    f = LaneFiles(tid)
    f.write(f.result, {"epoch": epoch, "rows": [asdict(r) for r in rows], "error": error, "failed": failed})


# ---- the task ----------------------------------------------------------------------------------------------

def ask(copier: LaneCopier) -> list[PartitionSummary] | None:
    """Have the worker that keeps this lane's clients run this epoch; its summaries, or None: start afresh.

    Raises CopyError when the served epoch ended on one (the copier's summaries are then the served ones)."""
    if copier.epoch is None or copier.prev_epoch is None or copier.attempt or copier.standby:
        return None
    f = LaneFiles(copier.tid)
    holder = f.read(f.holder)
    key = plan_key(copier)
    if (holder is None or holder.get("pid") == os.getpid() or holder.get("epoch") != copier.prev_epoch
            or holder.get("key") != key or not _alive(holder)):
        return None
    pid = int(holder["pid"])
    try:
        f.drop(f.accepted, f.refused, f.withdrawn, f.stop, f.result)
        f.write(f.req, {"epoch": copier.epoch, "prev_epoch": copier.prev_epoch, "key": key,
                        "deadline": time.time() + copier.epoch_seconds, "pid": os.getpid()})
    except OSError as e:
        log.info("lane %s: cannot ask worker %d (%s); starting afresh", copier.tid, pid, e)
        return None
    if not _answered(copier, f, pid):
        return None
    log.info("lane %s: epoch %d runs in worker %d, which keeps the lane's clients", copier.tid, copier.epoch,
             pid)
    doc = _result(copier, f, holder)
    if doc is None:
        return None
    rows = [PartitionSummary(**r) for r in doc["rows"]]
    if doc.get("failed"):
        log.warning("lane %s: worker %d could not run epoch %d (%s); starting afresh", copier.tid, pid,
                    copier.epoch, doc["failed"])
        return None
    if doc.get("error"):
        copier.summaries = {(r.source_topic, r.partition): r for r in rows}
        raise CopyError(doc["error"])
    return rows


def _answered(copier: LaneCopier, f: LaneFiles, pid: int) -> bool:
    """Wait for the keeping worker to take the request; withdraw it when it does not answer in time."""
    until = time.monotonic() + ANSWER_SECONDS + 3 * copier.config.commitIntervalMs / 1000
    while time.monotonic() < until and not f.accepted.exists() and not f.refused.exists():
        time.sleep(0.005)
    if not f.accepted.exists() and not f.refused.exists():
        try:
            os.rename(f.req, f.withdrawn)
            f.drop(f.withdrawn)
            log.info("lane %s: worker %d keeping its clients did not answer; starting afresh", copier.tid, pid)
            return False
        except OSError:  # taken just now: the rename that took it already made one of the two
            until = time.monotonic() + 5.0
            while not f.accepted.exists() and not f.refused.exists() and time.monotonic() < until:
                time.sleep(0.005)
    if not f.accepted.exists():
        log.info("lane %s: worker %d keeping its clients refused epoch %d (see its log); starting afresh",
                 copier.tid, pid, copier.epoch)
        f.drop(f.refused)
        return False
    f.drop(f.accepted)
    return True


def _result(copier: LaneCopier, f: LaneFiles, holder: dict) -> dict | None:
    """Wait for the served epoch's result while the keeping worker lives; pass a stop on to it."""
    stopped = False
    next_check = 0.0
    while True:
        doc = f.read(f.result) if f.result.exists() else None
        if doc is not None and doc.get("epoch") == copier.epoch:
            f.drop(f.result, f.stop)
            return doc
        now = time.monotonic()
        if now >= next_check:
            next_check = now + 0.5
            if not stopped and copier.should_stop():
                f.write(f.stop, {"epoch": copier.epoch})
                stopped = True
            if not _alive(holder):
                log.warning("lane %s: worker %d running epoch %d went away; starting afresh", copier.tid,
                            holder["pid"], copier.epoch)
                return None
        time.sleep(0.01)
