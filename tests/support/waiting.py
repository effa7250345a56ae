"""Polling until something holds, shared by the tests and the benches that drive the operator (not product)."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

_log = logging.getLogger("tests.operator.wait")


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 120.0, interval: float = 0.2) -> Any:
    """Poll fn until it returns something truthy; fail naming `what` and the last value or error. 120 s by
    default: in CI's loaded parallel phase the operator took over 60 s to act on a change (a wait, not a speed
    claim: a passing wait costs nothing)."""
    start = time.monotonic()
    deadline = start + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = fn()
            if last:
                _log.info("waited %.2fs for %s", time.monotonic() - start, what)
                return last
        except Exception as e:  # noqa: BLE001 - keep polling, report the last error
            last = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")


