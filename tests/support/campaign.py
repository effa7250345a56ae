"""Proofs kept out of `make test` for its time budget and run by `make campaign` (SPARKMIRROR_CAMPAIGN=1): the
load-sensitive end-to-end campaigns, and the record path's variants of the long fault tests now that batches are
the default path (each such test keeps its batch-path variant in `make test`)."""
from __future__ import annotations

import os

import pytest

ONLY_IN_CAMPAIGN = pytest.mark.skipif(os.environ.get("SPARKMIRROR_CAMPAIGN") != "1",
                                      reason="a campaign: make campaign (SPARKMIRROR_CAMPAIGN=1)")
RECORDS_IN_CAMPAIGN = pytest.param("records", marks=ONLY_IN_CAMPAIGN)
"""`copy: records` as a parameter of a long fault test: its batch-path variant runs in `make test`."""
