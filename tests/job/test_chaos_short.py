"""The fault campaign of `make chaos` (bench/chaos.py), short: one SIGKILL of each of its five kinds (the driver,
restarted as a supervisor would; a Python worker; an executor JVM; a source broker; a target broker) under load on
two clusters of three brokers (RF 3, min.insync.replicas 2), the mirror on a Spark standalone cluster; every record
counted. The cluster outages are left to tests/job/test_outages.py (each cluster away for longer than every client
timeout). A campaign (`make campaign`, `make chaos` runs them all, many times), not `make test`: its six brokers
and standalone cluster take six minutes of CI's sixty with both cores to themselves, and each kind is proven in
`make test` on its own (tests/job/test_eos_crash.py the driver and a Python worker, test_standalone_cluster.py a
worker, test_batch_retries.py a broker of three)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, where bench/ lives

from bench.chaos import KINDS, run_campaign  # noqa: E402

pytestmark = [pytest.mark.minutes(6), pytest.mark.solo,
              pytest.mark.skipif(os.environ.get("SPARKMIRROR_CAMPAIGN") != "1",
                                 reason="a campaign: make campaign (SPARKMIRROR_CAMPAIGN=1)")]


@pytest.mark.timeout(1800)  # six brokers, a standalone cluster and five faults (one a driver restart), on 2 cores
def test_a_kill_of_each_kind_loses_and_repeats_nothing(tmp_path, figure):
    lines: list[str] = []
    camp, rows = run_campaign(kills=1, outages=0, outage_s=65.0, pause_s=5.0, rate=100.0, workdir=tmp_path,
                              log=lines.append, kinds=KINDS)
    print("\n".join(lines))
    figure("fault_recovery", rows)
    assert len(KINDS) == 5 and sorted((r["fault"], r["count"]) for r in rows) == sorted((k, 1) for k in KINDS), rows
    # each fault hit something: a kill that found no process is recorded (detail "no ... found") and recovers
    assert [(f.kind, f.detail) for f in camp.faults if f.detail.startswith("no ")] == []
    assert camp.sent > 0 and camp.records >= camp.sent * 3
    assert (camp.missing, camp.duplicated) == (0, 0), rows
    assert not camp.mirror_ended, camp.mirror_ended
    assert all(r["recovered"] == r["count"] for r in rows), rows
