"""Whether a Lease's holder is alive, from its renewals: pure (the Lease, when it moved, the clock).

The worker generation a Lease names renews `spec.renewTime` (sparkmirror.handoff.renewal); the operator owns
every other field. A holder is silent once neither its last renewal nor the Lease's move to it (a holder has
had no chance to renew before it) is within `spec.leaseDurationSeconds`. During a handoff a silent successor is
rolled back at once (rollout.py, handback.py: a frozen pod or VM reports no failure, and
`handoffTimeoutSeconds` is minutes); outside one, nobody could take its place, so the status says so.

The renewal's age is judged as client-go's leader election does: by when the operator *saw* `renewTime` change, on
its own monotonic clock (`observe`, `RenewalClock`), never by the timestamp's value, which is the driver's clock: a
driver whose clock runs behind by more than `leaseDurationSeconds` would otherwise look stalled.
"""
from __future__ import annotations

import datetime as dt
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

DEFAULT_DURATION = 15


def renewed_ms(lease: dict[str, Any] | None) -> int | None:
    """`spec.renewTime` in epoch ms (None: never renewed, or not a time)."""
    value = ((lease or {}).get("spec") or {}).get("renewTime")
    if not value:
        return None
    try:
        return int(dt.datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def failure_current(record: dict[str, Any], lease: dict[str, Any] | None) -> bool:
    """Whether a job's failure record (names.LEASE_FAILURE) still says why its generation does not copy: its
    driver has not renewed the Lease since writing it. Between the Spark operator's retries the application is
    submitted or running again, so its state alone would hide the refusal (and its silence read as a stall)."""
    at = record.get("atMs")
    if not isinstance(at, int):
        return True  # (a record without a time: kept as before, until the generation changes)
    renewed = renewed_ms(lease)
    return renewed is None or renewed < at


def duration(lease: dict[str, Any] | None) -> int:
    try:
        return int(((lease or {}).get("spec") or {}).get("leaseDurationSeconds") or DEFAULT_DURATION)
    except (TypeError, ValueError):
        return DEFAULT_DURATION


@dataclass(frozen=True)
class Seen:
    """What the operator last saw of a Lease's renewal, and when by its own monotonic clock (ms)."""
    holder: str | None
    renew_time: str | None
    at_ms: int


def observe(prev: Seen | None, lease: dict[str, Any] | None, mono_ms: int) -> Seen:
    """`prev` kept while neither the holder nor `renewTime` changed, else a new observation stamped `mono_ms`.
    The first observation (an operator that just started) counts as fresh: it waits a whole duration before
    calling the holder silent, as client-go's elector does."""
    spec = (lease or {}).get("spec") or {}
    holder, renew_time = spec.get("holderIdentity"), spec.get("renewTime")
    if prev is not None and prev.holder == holder and prev.renew_time == renew_time:
        return prev
    return Seen(holder, str(renew_time) if renew_time else None, mono_ms)


class RenewalClock:
    """The operator's observations of every Lease it reconciles, keyed by (resource, group): the one piece of
    state behind `renewal_age_ms` (lost on restart, which only delays a verdict by one duration)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock, self._seen, self._lock = clock, dict[tuple[str, str], Seen](), threading.Lock()

    def ages_ms(self, resource: str, leases: dict[str, dict[str, Any]]) -> dict[str, int]:
        """Per group of `resource` (namespace/name), ms since the operator saw its Lease renewed (groups never
        renewed are left out)."""
        now = int(self._clock() * 1000)
        out: dict[str, int] = {}
        with self._lock:
            for group, lease in leases.items():
                seen = self._seen[(resource, group)] = observe(self._seen.get((resource, group)), lease, now)
                if seen.renew_time is not None:
                    out[group] = now - seen.at_ms
        return out


def _last_renewal_ms(lease: dict[str, Any] | None, now_ms: int, renewal_age_ms: int | None) -> int | None:
    """The last renewal on the operator's clock: `now_ms` less the observed age when known, else (a caller with
    no observations, e.g. a one-off plan) the driver's timestamp."""
    if renewed_ms(lease) is None:
        return None
    return now_ms - renewal_age_ms if renewal_age_ms is not None else renewed_ms(lease)


def silent_for(lease: dict[str, Any] | None, held_since_ms: int, now_ms: int,
               renewal_age_ms: int | None = None) -> float:
    """Seconds since the holder last showed life: its last renewal, or `held_since_ms` (the Lease moved to it, or
    was created naming it) when that is later: a renewal from before the move is the previous holder's.
    `renewal_age_ms`: how long ago the operator saw `renewTime` change (RenewalClock)."""
    last = max(_last_renewal_ms(lease, now_ms, renewal_age_ms) or 0, held_since_ms)
    return max(0.0, (now_ms - last) / 1000)


def silence(lease: dict[str, Any] | None, held_since_ms: int, now_ms: int,
            renewal_age_ms: int | None = None) -> str | None:
    """Why the holder counts as stalled (None: it renews, or nothing says since when it holds the Lease): silent
    for longer than the Lease's duration."""
    if not held_since_ms and renewed_ms(lease) is None:
        return None
    quiet, limit = silent_for(lease, held_since_ms, now_ms, renewal_age_ms), duration(lease)
    if quiet <= limit:
        return None
    last = _last_renewal_ms(lease, now_ms, renewal_age_ms)
    since = "since the Lease moved to it" if last is None or last < held_since_ms else "for"
    return f"it has not renewed its Lease {since} {quiet:.0f} s (leaseDurationSeconds {limit})"


def held_since_ms(lease: dict[str, Any] | None, moved_at: str | None) -> int:
    """When the Lease came to its holder: the operator's `moved-at` stamp, else the Lease's creation."""
    if moved_at:
        try:
            return int(moved_at)
        except ValueError:
            pass
    created = ((lease or {}).get("metadata") or {}).get("creationTimestamp")
    if not created:
        return 0
    return int(dt.datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp() * 1000)
