"""How many committed ranges per source partition the driver may keep (issue 39 item 4, memory with a bound).

The offset history (`progress.state.OffsetMap`) is the driver's one structure that grows with uptime until its
cap: one range per commit interval per source partition. Its cap is therefore sized from what the driver has,
not from a constant: a share of `spark.driver.memory` (`HISTORY_SHARE`) divided among the source partitions
the driver serves, at the bytes a range costs as measured on this interpreter (`progress.footprint`). A cap the
user set (`spec.spark.offsetHistory`) that cannot fit is refused, naming the fields and the figures: a driver
that would be killed for memory hours later is worse than one that refuses at start.

Pure: values in, a `HistoryBudget` or `HistoryTooLarge` out. The driver gathers the values (`historycap.py`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

HISTORY_SHARE = 0.25  # of spark.driver.memory: the Python driver lives in the pod's overhead, beside the JVM
MIN_RANGES = 1000     # below this a checkpoint is rarely possible (the resource's own minimum)
MAX_RANGES = 100_000_000  # the resource's maximum
MIB = 1024 * 1024

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_UNIT = {"": MIB, "k": 1024, "m": MIB, "g": 1024 * MIB, "t": 1024 ** 2 * MIB, "p": 1024 ** 3 * MIB}

DRIVER_MEMORY_FIELD = "spec.spark.driver.memory (spark.driver.memory)"
HISTORY_FIELD = "spec.spark.offsetHistory"


class HistoryTooLarge(ValueError):
    """The configuration cannot hold its offset history in the driver's memory; the message names the fields."""


def parse_memory(text: str) -> int:
    """Bytes of a Spark driver-memory size ("512m", "2g", "1024": MiB, as Spark reads spark.driver.memory)."""
    m = _SIZE.match(text or "")
    if not m:
        raise HistoryTooLarge(f"{DRIVER_MEMORY_FIELD}: {text!r} is not a Spark size (e.g. 512m, 2g)")
    return int(m.group(1)) * _UNIT[m.group(2).lower()]


def held_ranges(cap: int) -> int:
    """Ranges an `OffsetMap` capped at `cap` holds at most: it trims in chunks (see `OffsetMap.keep_last`)."""
    return cap + max(cap // 8, 1024) + 1


@dataclass(frozen=True)
class HistoryBudget:
    driver_memory: int      # bytes (spark.driver.memory)
    share: float            # of it given to the history
    partitions: int         # source partitions the driver serves
    bytes_per_range: float  # measured
    cap: int                # ranges kept per partition
    derived: bool           # True: sized here; False: the user's spec.spark.offsetHistory

    @property
    def budget(self) -> int:
        return int(self.driver_memory * self.share)

    @property
    def needed(self) -> int:
        """Bytes the history takes once every partition reached its cap."""
        return int(self.partitions * held_ranges(self.cap) * self.bytes_per_range)

    def describe(self) -> str:
        how = "derived" if self.derived else f"set by {HISTORY_FIELD}"
        return (f"offset history budget: {self.share:.0%} of driver memory {self.driver_memory / MIB:,.0f} MiB = "
                f"{self.budget / MIB:,.1f} MiB for {self.partitions} source partitions at "
                f"{self.bytes_per_range:.1f} bytes/range (measured): cap {self.cap:,} ranges/partition ({how}), "
                f"{self.needed / MIB:,.1f} MiB when full")


def fitting_cap(budget: int, partitions: int, bytes_per_range: float) -> int:
    """The largest cap whose held ranges (`held_ranges`) for `partitions` fit in `budget` bytes (0: none)."""
    lo, hi = 0, int(budget / max(partitions, 1) / bytes_per_range) + 1
    while lo < hi:  # held_ranges grows with the cap: the last cap that fits
        mid = (lo + hi + 1) // 2
        if max(partitions, 1) * held_ranges(mid) * bytes_per_range <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def size_history(driver_memory: str, partitions: int, bytes_per_range: float, requested: int | None,
                 share: float = HISTORY_SHARE) -> HistoryBudget:
    """The history's cap for a driver of `driver_memory` serving `partitions`: `requested` if it fits, else
    `HistoryTooLarge`; without `requested`, the largest cap that fits (at most MAX_RANGES), at least MIN_RANGES
    or `HistoryTooLarge`."""
    total = parse_memory(driver_memory)
    budget = int(total * share)
    fits = min(fitting_cap(budget, partitions, bytes_per_range), MAX_RANGES)
    shown = (f"{share:.0%} of {DRIVER_MEMORY_FIELD}={driver_memory} is {budget / MIB:,.1f} MiB for "
             f"{partitions} source partitions at {bytes_per_range:.1f} bytes/range")
    if requested is not None:
        need = partitions * held_ranges(requested) * bytes_per_range
        if requested > fits:
            more = _memory_for(partitions * held_ranges(requested) * bytes_per_range / share)
            lower = (f"set {HISTORY_FIELD} to at most {fits:,} (or leave it out to size it), or "
                     if fits >= MIN_RANGES else f"at most {fits:,} fit, below the minimum {MIN_RANGES:,}: set ")
            raise HistoryTooLarge(f"{HISTORY_FIELD}={requested:,} ranges/partition needs {need / MIB:,.1f} MiB but "
                                  f"{shown}: {lower}{DRIVER_MEMORY_FIELD} to at least {more}")
        return HistoryBudget(total, share, partitions, bytes_per_range, requested, derived=False)
    if fits < MIN_RANGES:
        more = _memory_for(partitions * held_ranges(MIN_RANGES) * bytes_per_range / share)
        raise HistoryTooLarge(f"{shown}: fewer than the minimum {MIN_RANGES:,} ranges/partition ({fits:,}) fit; "
                              f"set {DRIVER_MEMORY_FIELD} to at least {more}, or serve fewer partitions per "
                              "flow group")
    return HistoryBudget(total, share, partitions, bytes_per_range, fits, derived=True)


def _memory_for(nbytes: float) -> str:
    """A Spark size (MiB, rounded up) of at least `nbytes`."""
    return f"{-(-int(nbytes) // MIB) + 1}m"
