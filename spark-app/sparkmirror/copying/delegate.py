"""A lane's epoch run by the Python worker that keeps the lane's clients, when Spark starts the task in another.

An executor hands a task to whichever of its Python workers went idle first, so a lane's next task lands in a
worker other than the one keeping its clients (sessions.py) about every other epoch. Starting afresh there
costs one to two seconds (producers, init_transactions fencing the kept copy, the progress read) in which the
lane copies nothing, and that stall was most of the mirror's p99 latency. Instead, the task asks the keeping
worker to run the epoch with its clients, waits, and yields the summaries it gets back as its own.

The workers of a host meet in a directory only their user may use (`lane_dir()`), one set of files per lane:
- `<lane>.holder`: the worker keeping the lane's clients (pid and start time, a token of its session, the
  epoch it ran, the key of its plan);
- `<lane>.req`: a task's request, addressed to that worker (its epoch, the epoch before it, the key, when its
  epoch ends, the task's own pid and start time);
- the addressee claims the request by renaming it to a name of its own, then renames it to `<lane>.accepted`
  or `<lane>.refused`; a task that got no answer renames it to `<lane>.withdrawn`. One rename wins, so a
  request is either served or withdrawn, never both;
- `<lane>.stop`: the task was told to stop (its route watch); `<lane>.result`: the summaries, or why not.

Exactly-once does not rest on this: a task that is refused, withdraws, loses the keeping worker or waits too
long starts afresh, and its init_transactions fences whatever the other worker still runs (see commit.py). A
served epoch never starts afresh itself (it ends instead, and the task does), and it stops when its task is
gone, so it cannot take the lane back from the task's retry.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..lanes import LanePartition
from .plans import grows, plan_key
from .summary import PartitionSummary

if TYPE_CHECKING:
    from .lane import LaneCopy

log = logging.getLogger(__name__)

ANSWER_SECONDS = 2.0
"""How long a task waits for the keeping worker to take its request, beyond three commit intervals (the
keeping worker looks for requests between transactions)."""
RESULT_GRACE_SECONDS = 120.0
"""How long past its epoch's end a task waits for the served epoch's result (the last commit's flush and
transaction may take up to a minute on a struggling target) before it starts afresh, fencing the other."""

RESULT_POLL_EARLY_S = 0.1
"""How often a task looks for the served epoch's result until a second before the epoch's planned end (every
10 ms after): an epoch that ends early (a stop, a failure) is noticed this much later."""


def lane_dir() -> Path:
    """Where the Python workers of this host and user meet."""
    return Path(tempfile.gettempdir()) / f"sparkmirror-lanes-{os.getuid()}"


def process_started(pid: int) -> str | None:
    """The process' start time (clock ticks since boot) while it runs, None once it ended (a zombie too) or
    where /proc does not say: a pid alone could be a new process, and a killed worker stays a zombie until its
    parent reaps it."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return None if fields[0] in ("Z", "X", "x") else fields[19]


@dataclass(frozen=True)
class Proc:
    """A process, told apart from a later one with the same pid."""

    pid: int
    started: str

    @classmethod
    def me(cls) -> Proc | None:
        started = process_started(os.getpid())
        return cls(os.getpid(), started) if started else None

    def alive(self) -> bool:
        return process_started(self.pid) == self.started


@dataclass(frozen=True)
class Request:
    epoch: int
    prev_epoch: int
    key: str
    deadline: float  # wall-clock seconds: when the task's epoch ends
    task: Proc
    holder: Proc
    partitions: tuple[LanePartition, ...]  # the task's plan of the lane: the kept one, maybe grown
    routes: tuple[tuple[str, str, int], ...] | None = None  # all the task's routes: the served epoch watches them


@dataclass
class Served:
    """What the keeping worker reports: the epoch's summaries, the CopyError that ended it, or why it could not
    run the epoch to its end (`failed`: the task starts afresh; `rows` are what it committed until then)."""

    epoch: int
    rows: list[PartitionSummary] = field(default_factory=list)
    error: str | None = None
    failed: str | None = None


class LaneFiles:
    """The files of one lane in `lane_dir()`."""

    def __init__(self, tid: str, root: Path | None = None) -> None:
        self.root = root or lane_dir()
        stem = hashlib.sha256(tid.encode()).hexdigest()[:24]
        self.holder, self.req, self.accepted, self.refused, self.withdrawn, self.stop, self.result = (
            self.root / f"{stem}.{n}" for n in ("holder", "req", "accepted", "refused", "withdrawn", "stop",
                                                 "result"))
        self.claimed = self.root / f"{stem}.req.{os.getpid()}"

    def ensure_root(self) -> None:
        """Create the directory, or refuse one this user does not own alone (another user could plant files)."""
        self.root.mkdir(mode=0o700, exist_ok=True)
        st = self.root.stat()
        if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
            raise PermissionError(f"{self.root} is not this user's alone")

    def write(self, path: Path, doc: dict) -> None:
        """Whole or not at all: readers never see half a file."""
        self.ensure_root()
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


# ---- the keeping worker ------------------------------------------------------------------------------------

def announce(tid: str, epoch: int, key: str) -> str | None:
    """This worker keeps the lane's clients, having run `epoch`; the session's token (for `retire`), or None
    when tasks elsewhere cannot find it (they start afresh, as without this module)."""
    me = Proc.me()
    if me is None:
        return None
    token = uuid.uuid4().hex
    try:
        f = LaneFiles(tid)
        f.write(f.holder, {"pid": me.pid, "started": me.started, "token": token, "epoch": epoch, "key": key})
    except OSError as e:
        log.info("lane %s: cannot announce its kept clients (%s)", tid, e)
        return None
    return token


def retire(tid: str, token: str | None) -> None:
    """The session `token` no longer keeps the lane's clients (a later session's file is left alone)."""
    f = LaneFiles(tid)
    doc = f.read(f.holder)
    if token and doc is not None and doc.get("token") == token:
        f.drop(f.holder)


def _request(doc: dict) -> Request:
    return Request(int(doc["epoch"]), int(doc["prev_epoch"]), str(doc["key"]), float(doc["deadline"]),
                   Proc(int(doc["task"]["pid"]), str(doc["task"]["started"])),
                   Proc(int(doc["holder"]["pid"]), str(doc["holder"]["started"])),
                   tuple(LanePartition(str(t), int(p), str(r)) for t, p, r in doc["partitions"]),
                   None if doc.get("routes") is None else tuple((str(s), str(t), int(n)) for s, t, n in doc["routes"]))


def asked(tid: str, me: Proc | None) -> bool:
    """A task elsewhere asks this worker for the lane's next epoch (one stat between transactions; the file is
    read only when there is one)."""
    f = LaneFiles(tid)
    if me is None or not f.req.exists():
        return False
    doc = f.read(f.req)
    try:
        return doc is not None and _request(doc).holder == me
    except (KeyError, TypeError, ValueError):
        return False


def take(tid: str, me: Proc, last_epoch: int, key: str, route: dict[tuple[str, int], str]) -> Request | None:
    """Claim the pending request, then accept it when it is addressed to this worker, follows the epoch these
    clients ran and plans the same lane over the kept `route` or more; refuse it otherwise (its task starts
    afresh). None unless accepted."""
    f = LaneFiles(tid)
    try:
        os.rename(f.req, f.claimed)  # from here on the task can no longer withdraw it
    except OSError:
        return None
    doc = f.read(f.claimed)
    try:
        req = _request(doc or {})
        why = ("addressed to another worker" if req.holder != me else "another plan" if req.key != key or not grows(
               route, {(p.source_topic, p.partition): p.target_topic for p in req.partitions}) else
               f"these clients ran epoch {last_epoch}, the task's follows {req.prev_epoch}"
               if req.prev_epoch != last_epoch else "")
    except (KeyError, TypeError, ValueError):
        req, why = None, "unreadable"
    try:
        os.rename(f.claimed, f.refused if why else f.accepted)
    except OSError as e:
        log.warning("lane %s: cannot answer a request (%s)", tid, e)
        return None
    if why or req is None:
        log.info("lane %s: not running an epoch for another worker: %s", tid, why)
        return None
    return req


def stop_asked(tid: str) -> bool:
    return LaneFiles(tid).stop.exists()


def publish(tid: str, served: Served) -> None:
    """The served epoch's report for the task (which starts afresh after a while if it never comes)."""
    f = LaneFiles(tid)
    t0 = time.monotonic()
    try:
        f.write(f.result, {"epoch": served.epoch, "rows": [asdict(r) for r in served.rows], "error": served.error,
                           "failed": served.failed})
        if len(served.rows) >= 1000:  # the epoch boundary's cost at scale
            log.info("lane %s: %d rows written for the task in %.0f ms", tid, len(served.rows),
                     (time.monotonic() - t0) * 1000)
    except OSError as e:
        log.warning("lane %s: cannot report epoch %d to its task (%s); it starts afresh", tid, served.epoch, e)


# ---- the task ----------------------------------------------------------------------------------------------

def ask(copier: LaneCopy) -> Served | None:
    """Have the worker that keeps this lane's clients run this epoch; its report, or None: start afresh."""
    if copier.epoch is None or copier.prev_epoch is None or copier.attempt or copier.standby:
        return None
    f = LaneFiles(copier.tid)
    doc = f.read(f.holder)
    me = Proc.me()
    if doc is None or me is None:
        return None
    key = plan_key(copier.tid, copier.config, copier.ctx.credentials)
    try:
        holder = Proc(int(doc["pid"]), str(doc["started"]))
        usable = holder != me and doc["epoch"] == copier.prev_epoch and doc["key"] == key and holder.alive()
    except (KeyError, TypeError, ValueError):
        return None
    if not usable:
        return None
    try:
        f.drop(f.accepted, f.refused, f.withdrawn, f.stop, f.result)
        f.write(f.req, {"epoch": copier.epoch, "prev_epoch": copier.prev_epoch, "key": key,
                        "deadline": time.time() + copier.epoch_seconds, "task": asdict(me),
                        "holder": asdict(holder),
                        "partitions": [[p.source_topic, p.partition, p.target_topic] for p in copier.partitions],
                        "routes": None if copier.watch is None else copier.watch.routes()})
    except OSError as e:
        log.info("lane %s: cannot ask worker %d (%s); starting afresh", copier.tid, holder.pid, e)
        return None
    if not _answered(copier, f, holder, doc.get("token")):
        return None
    log.info("lane %s: epoch %d runs in worker %d, which keeps the lane's clients", copier.tid, copier.epoch,
             holder.pid)
    if copier.watch is not None:  # that worker watches the source for the epoch (the request has the routes)
        copier.watch.elsewhere = True
    return _result(copier, f, holder)


def _answered(copier: LaneCopy, f: LaneFiles, holder: Proc, token: str | None) -> bool:
    """Wait for the keeping worker to take the request; withdraw it when it does not answer in time or stops
    keeping the clients meanwhile."""
    until = time.monotonic() + ANSWER_SECONDS + 3 * copier.config.commitIntervalMs / 1000
    next_check = 0.0
    while not f.accepted.exists() and not f.refused.exists():
        now = time.monotonic()
        if now >= until:
            break
        if now >= next_check:  # its session ended (time, drain, fencing): nobody will answer
            next_check = now + 0.1
            doc = f.read(f.holder)
            if doc is None or doc.get("token") != token or not holder.alive():
                break
        time.sleep(0.005)
    if not f.accepted.exists() and not f.refused.exists():
        try:
            os.rename(f.req, f.withdrawn)
            f.drop(f.withdrawn)
            log.info("lane %s: worker %d keeping its clients did not answer; starting afresh", copier.tid,
                     holder.pid)
            return False
        except OSError:  # claimed just now: its answer follows
            until = time.monotonic() + 5.0
            while not f.accepted.exists() and not f.refused.exists() and time.monotonic() < until:
                time.sleep(0.005)
    if not f.accepted.exists():
        log.info("lane %s: worker %d keeping its clients did not take epoch %d (see its log); starting afresh",
                 copier.tid, holder.pid, copier.epoch)
        f.drop(f.refused)
        return False
    f.drop(f.accepted)
    return True


def _result(copier: LaneCopy, f: LaneFiles, holder: Proc) -> Served | None:
    """Wait for the served epoch's report while the keeping worker lives and not too long after the epoch's end;
    pass a stop on to it."""
    give_up = time.monotonic() + copier.epoch_seconds + RESULT_GRACE_SECONDS
    deadline = time.time() + copier.epoch_seconds
    stopped = False
    next_check = 0.0
    while True:
        t0 = time.monotonic()
        doc = f.read(f.result) if f.result.exists() else None
        if doc is not None and doc.get("epoch") == copier.epoch:
            f.drop(f.result, f.stop)
            served = Served(copier.epoch, [PartitionSummary(**r) for r in doc["rows"]], doc.get("error"),
                            doc.get("failed"))
            if len(served.rows) >= 1000:  # the epoch boundary's cost at scale
                log.info("lane %s: %d rows read in %.0f ms, %.1f s after the epoch's planned end", copier.tid,
                         len(served.rows), (time.monotonic() - t0) * 1000, time.time() - deadline)
            if served.failed:
                log.warning("lane %s: worker %d ended epoch %d early (%s); starting afresh", copier.tid,
                            holder.pid, copier.epoch, served.failed)
            return served
        now = time.monotonic()
        if now >= next_check:
            next_check = now + 0.5
            if not stopped and copier.should_stop():
                stopped = _tell_stop(f, copier.epoch)
            if not holder.alive() or now >= give_up:
                log.warning("lane %s: worker %d running epoch %d %s; starting afresh", copier.tid, holder.pid,
                            copier.epoch, "went away" if now < give_up else "did not report in time")
                _tell_stop(f, copier.epoch)  # if it still runs, it stops; the fresh start fences it anyway
                return None
        # the answer comes at the epoch's planned end (or early, on a stop or a failure): looking every 10 ms
        # all epoch long woke this thread 100 times a second in a worker whose own kept lane needs the GIL
        time.sleep(RESULT_POLL_EARLY_S if deadline - time.time() > 1.0 else 0.01)


def _tell_stop(f: LaneFiles, epoch: int) -> bool:
    try:
        f.write(f.stop, {"epoch": epoch})
        return True
    except OSError as e:
        log.warning("cannot tell the keeping worker to stop (%s)", e)
        return False
