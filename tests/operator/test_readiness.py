"""A ready report counts only for the application's current submission, pure (readiness.py)."""
from __future__ import annotations

import json

from sparkmirror_operator.readiness import counts, report_submission


def app(submission: str | None) -> dict:
    return {"status": {"submissionID": submission, "applicationState": {"state": "RUNNING"}}}


def report(submission: str | None) -> str:
    return json.dumps({"atMs": 1_764_331_200_000, "submissionID": submission})


def test_a_report_counts_only_for_the_submission_that_made_it():
    assert counts(report("s-2"), app("s-2"))
    assert not counts(report("s-1"), app("s-2"))  # from before the application restarted: stale
    assert not counts("1764331200000", app("s-2"))  # an old-format report names no submission: stale too
    assert not counts(None, app("s-2")) and not counts(report("s-2"), None)
    assert not counts(report("s-2"), app(None))  # not (re)submitted yet as far as the status says
    assert counts(report(None), app(None))  # a runner that gives no ids: the application being up decides
    assert report_submission("not json") is None and report_submission(report("s-9")) == "s-9"
