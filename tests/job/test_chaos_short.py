"""The fault campaign of `make chaos` (bench/chaos.py), short: one SIGKILL of an executor JVM, a source broker and
a target broker under load on two clusters of three brokers (RF 3, min.insync.replicas 2), the mirror on a Spark
standalone cluster; every record counted. The other faults are proven elsewhere in the suite, which must stay
well inside CI's time: SIGKILLs of the job and of a Python worker in tests/job/test_eos_crash.py, each cluster
away for longer than every client timeout in tests/job/test_outages.py; `make chaos` runs them all."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, where bench/ lives

from bench.chaos import KINDS, run_campaign  # noqa: E402

pytestmark = [pytest.mark.minutes(4), pytest.mark.solo]

SHORT = ("executor", "source-broker", "target-broker")
assert set(SHORT) <= set(KINDS)


@pytest.mark.timeout(1200)  # six brokers, a standalone cluster and three faults, on 2 cores
def test_executor_and_broker_kills_lose_and_repeat_nothing(tmp_path, figure):
    lines: list[str] = []
    camp, rows = run_campaign(kills=1, outages=0, outage_s=65.0, pause_s=5.0, rate=100.0, workdir=tmp_path,
                              log=lines.append, kinds=SHORT)
    print("\n".join(lines))
    figure("fault_recovery", rows)
    assert {r["fault"] for r in rows} == set(SHORT)
    assert camp.sent > 0 and camp.records >= camp.sent * 3
    assert (camp.missing, camp.duplicated) == (0, 0), rows
    assert not camp.mirror_ended, camp.mirror_ended
    assert all(r["recovered"] == r["count"] for r in rows), rows
