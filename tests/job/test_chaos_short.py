"""The fault campaign of `make chaos` (bench/chaos.py), short: one SIGKILL of each kind under load on two clusters of
three brokers (RF 3, min.insync.replicas 2), the mirror on a Spark standalone cluster; every record counted.
Whole-cluster outages are left to `make chaos` here: tests/job/test_outages.py takes each cluster away for
longer than every client timeout already, and the suite must stay well inside CI's time."""
from __future__ import annotations

import pytest

from bench.chaos import KINDS, run_campaign


@pytest.mark.timeout(1200)  # six brokers' restarts and a driver restart, on 2 cores
def test_every_fault_once_nothing_lost_nothing_duplicated(tmp_path):
    lines: list[str] = []
    camp, rows = run_campaign(kills=1, outages=0, outage_s=65.0, pause_s=5.0, rate=100.0, workdir=tmp_path,
                              log=lines.append)
    print("\n".join(lines), rows, sep="\n")
    assert {r["fault"] for r in rows} == set(KINDS)
    assert camp.sent > 0 and camp.records >= camp.sent * 3
    assert (camp.missing, camp.duplicated) == (0, 0), rows
    assert not camp.mirror_ended, camp.mirror_ended
    assert all(r["recovered"] == r["count"] for r in rows), rows
