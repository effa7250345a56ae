"""Live progress in the terminal: one line per mirror, redrawn in place on a TTY, printed every few seconds otherwise;
or, with `-o json|yaml`, one JSON line (YAML document) per update for programs to read."""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, TextIO

from ..output import dump
from .local import MirrorView


def _rate(x: float) -> str:
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if x >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


def _bytes(x: float) -> str:
    for unit, div in (("MB", 1e6), ("kB", 1e3)):
        if x >= div:
            return f"{x / div:.1f} {unit}"
    return f"{x:.0f} B"


HEADER = f"{'FLOW GROUP':<16} {'MIRROR':<22} {'TOPICS':>6} {'PARTS':>6} {'REC/S':>8} {'BYTES/S':>10} {'LAG':>9} {'MIRRORED':>10}  STATUS"


def waiting(v: MirrorView, now: float | None = None) -> str | None:
    """'waiting: target cluster 'b' unreachable for 35 s', while the mirror waits for a cluster."""
    if not v.waiting:
        return None
    since = f" for {max((now or time.time()) - v.waiting_since, 0):.0f} s" if v.waiting_since else ""
    return f"waiting: {v.waiting}{since}"


def status_of(v: MirrorView, failures: dict[str, str] | None = None) -> str:
    err = (failures or {}).get(v.mirror) or next(iter(v.errors.values()), None)
    return f"error: {err}" if err else waiting(v) or (
        "caught up" if v.lag == 0 else "mirroring" if v.partitions else "waiting")


def state(views: list[MirrorView], failures: dict[str, str] | None = None) -> dict[str, Any]:
    """What the table shows, as data: per mirror the view's fields and its status."""
    return {"time": round(time.time(), 3),
            "mirrors": [{**dataclasses.asdict(v), "status": status_of(v, failures)} for v in views]}


def lines(views: list[MirrorView], failures: dict[str, str] | None = None) -> list[str]:
    out = [HEADER]
    for v in views:
        status = status_of(v, failures)
        lag = "?" if v.lag is None else str(v.lag)
        out.append(f"{v.flow_group[:16]:<16} {(v.source + ' -> ' + v.target)[:22]:<22} {v.topics:>6} {v.partitions:>6} "
                   f"{_rate(v.records_per_s):>8} {_bytes(v.bytes_per_s):>10} {lag:>9} {v.records_total:>10}  {status}")
    return out


class Progress:
    """`fmt` None: the table; "json"/"yaml": one state per update (every `every` seconds and the final one)."""

    def __init__(self, out: TextIO | None = None, every: float = 5.0, fmt: str | None = None) -> None:
        self.out, self.every, self.fmt = out or sys.stdout, every, fmt
        self.tty = fmt is None and self.out.isatty()
        self._drawn = 0
        self._last = 0.0

    def show(self, views: list[MirrorView], failures: dict[str, str] | None = None) -> None:
        now = time.monotonic()
        if not self.tty and now - self._last < self.every:
            return
        self._last = now
        if self.fmt is not None:
            self.out.write(dump(state(views, failures), self.fmt, stream=True))
            self.out.flush()
            return
        text = lines(views, failures)
        if self.tty and self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")  # back to the first line drawn, clear below
        self.out.write("\n".join(text) + "\n")
        self.out.flush()
        self._drawn = len(text)

    def final(self, views: list[MirrorView], failures: dict[str, str] | None = None) -> None:
        """The last state, whenever the previous one was shown: on a TTY it replaces the table in place."""
        self._last = 0.0
        self.show(views, failures)
