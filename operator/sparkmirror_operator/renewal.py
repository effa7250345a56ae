"""Whether a Lease's holder is alive, from its renewals: pure (the Lease, when it moved, the clock).

The worker generation a Lease names renews `spec.renewTime` (sparkmirror.handoff.renewal); the operator owns
every other field. A holder is silent once neither its last renewal nor the Lease's move to it (a holder has
had no chance to renew before it) is within `spec.leaseDurationSeconds`. During a handoff a silent successor is
rolled back at once (rollout.py, handback.py: a frozen pod or VM reports no failure, and
`handoffTimeoutSeconds` is minutes); outside one, nobody could take its place, so the status says so.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

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


def duration(lease: dict[str, Any] | None) -> int:
    try:
        return int(((lease or {}).get("spec") or {}).get("leaseDurationSeconds") or DEFAULT_DURATION)
    except (TypeError, ValueError):
        return DEFAULT_DURATION


def silent_for(lease: dict[str, Any] | None, held_since_ms: int, now_ms: int) -> float:
    """Seconds since the holder last showed life: its last renewal, or `held_since_ms` (the Lease moved to it, or
    was created naming it) when that is later: a renewal from before the move is the previous holder's."""
    last = max(renewed_ms(lease) or 0, held_since_ms)
    return max(0.0, (now_ms - last) / 1000)


def silence(lease: dict[str, Any] | None, held_since_ms: int, now_ms: int) -> str | None:
    """Why the holder counts as stalled (None: it renews, or nothing says since when it holds the Lease): silent
    for longer than the Lease's duration."""
    if not held_since_ms and renewed_ms(lease) is None:
        return None
    quiet, limit = silent_for(lease, held_since_ms, now_ms), duration(lease)
    if quiet <= limit:
        return None
    last = renewed_ms(lease)
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
