"""The fault campaign of `make chaos` (bench/chaos.py), short: one fault of each kind under load on two clusters of
three brokers (RF 3, min.insync.replicas 2), the mirror on a Spark standalone cluster; every record counted."""
from __future__ import annotations

import pytest

from bench.chaos import KINDS, OUTAGES, run_campaign


@pytest.mark.timeout(1200)  # two 65 s outages, six clusters' restarts and a driver restart, on 2 cores
def test_every_fault_once_nothing_lost_nothing_duplicated(tmp_path):
    lines: list[str] = []
    camp, rows = run_campaign(kills=1, outages=1, outage_s=65.0, pause_s=5.0, rate=100.0, workdir=tmp_path,
                              log=lines.append)
    print("\n".join(lines), rows, sep="\n")
    assert {r["fault"] for r in rows} == {*KINDS, *OUTAGES}
    assert camp.sent > 0 and camp.records >= camp.sent * 3
    assert (camp.missing, camp.duplicated) == (0, 0), rows
    assert not camp.mirror_ended, camp.mirror_ended
    assert all(r["recovered"] == r["count"] for r in rows), rows
