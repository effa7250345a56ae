"""Whether a standby's `ready.g<N>` report counts now: pure (the report, its SparkApplication).

A report is the warm state of one run of the driver; a restarted application (a new submission, a new driver) is
cold again. The report names its submission (names.SUBMISSION_ENV, from the Spark operator's submission-id label
on the driver pod); it counts only while that is the application's `status.submissionID`.
"""
from __future__ import annotations

import json
from typing import Any


def report_submission(report: str | None) -> str | None:
    """The submission a ready report names (None: none, e.g. a report written before reports named one)."""
    try:
        value = json.loads(report or "")
    except ValueError:
        return None
    return str(value["submissionID"]) if isinstance(value, dict) and value.get("submissionID") else None


def current_submission(app: dict[str, Any] | None) -> str | None:
    return ((app or {}).get("status") or {}).get("submissionID") or None


def counts(report: str | None, app: dict[str, Any] | None) -> bool:
    """A report counts when there is one and it names the application's current submission (neither naming
    one: an application run by something that gives no ids)."""
    return bool(report) and app is not None and report_submission(report) == current_submission(app)
