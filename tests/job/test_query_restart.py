"""A streaming query that Spark itself failed, for a reason that says nothing of the mirror, starts again.

Spark waits a fixed 10 s for a Python worker it started to connect back; on a loaded host (2 cores, a kind
cluster and Spark drivers beside it) one missed it and the whole job ended. Here the interpreter that Spark starts
for the mirror's streaming source waits 13 s the first time (a wrapper script), for real: the query fails as it
did then, the driver starts it again from its checkpoint, and every record arrives once."""
from __future__ import annotations

import sys

import pytest

from sparkmirror_dev.testing import produce_numbered, read_topic

from .conftest import wait_for

pytestmark = [pytest.mark.minutes(1.1), pytest.mark.kafka, pytest.mark.spark]


def test_a_query_whose_python_worker_connects_back_late_starts_again(kafka_a, kafka_b, topic, flowgroup, job,
                                                                     tmp_path) -> None:
    marker = tmp_path / "slowed-once"
    wrapper = tmp_path / "python-slow-once"
    wrapper.write_text(f"""#!/bin/sh
case " $* " in
  *python_streaming_source_runner*) if [ ! -e "{marker}" ]; then touch "{marker}"; sleep 13; fi ;;
esac
exec "{sys.executable}" "$@"
""")
    wrapper.chmod(0o755)
    src = topic(kafka_a, 2)
    produce_numbered(kafka_a.bootstrap, src, 2, 0, 100)
    jp = job(flowgroup(src), env={"PYSPARK_PYTHON": str(wrapper)})
    remote = f"a.{src}"
    wait_for(lambda: jp.proc.poll() is not None
             or sum(len(v) for v in read_topic(kafka_b.bootstrap, remote, 5).values()) >= 200, 300,
             "the records on the target")
    log = jp.log()
    assert jp.proc.poll() is None, log[-3000:]
    assert marker.exists(), "the wrapper never ran: Spark did not start the source's worker through it"
    assert "Python worker failed to connect back (Spark, not the mirror); starting it again" in log, log[-3000:]
    produce_numbered(kafka_a.bootstrap, src, 2, 100, 20)
    wait_for(lambda: sum(len(v) for v in read_topic(kafka_b.bootstrap, remote, 5).values()) >= 240, 120,
             "the later records")
    assert jp.stop() == 0, jp.log()[-3000:]
    seqs = {p: [int(r.value.decode().split(":")[1]) for r in recs] for p, recs in read_topic(kafka_b.bootstrap,
                                                                                           remote).items()}
    assert seqs == {0: list(range(120)), 1: list(range(120))}
