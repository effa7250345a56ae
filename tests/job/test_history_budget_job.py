"""The offset history's budget on real local Spark and Kafka (issue 39 item 4): the job sizes the cap from
spark.driver.memory and the source partitions it serves, logs it, copies with it (every record once), hands it
to the driver's progress readers, and refuses a cap that cannot fit with exit 2 and one line naming the fields."""
from __future__ import annotations

import re

import pytest

from sparkmirror.historybudget import size_history
from sparkmirror.resource.names import EXIT_REFUSED
from sparkmirror_dev.testing import check_numbered, produce_numbered

from .conftest import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(0.8)]
PARTITIONS = 4
BUDGET = re.compile(r"offset history budget: 25% of driver memory 512 MiB = 128\.0 MiB for (\d+) source partitions "
                    r"at ([\d.]+) bytes/range \(measured\): cap ([\d,]+) ranges/partition \(derived\)")


def test_the_job_sizes_logs_and_copies_with_its_budget(kafka_a, kafka_b, topic, flowgroup, job) -> None:
    src = topic(kafka_a, partitions=PARTITIONS)
    produce_numbered(kafka_a.bootstrap, src, PARTITIONS, 0, 500)
    cfg = flowgroup(src)
    assert cfg.offsetHistory is None  # not set: the driver sizes it
    jp = job(cfg)  # spark.driver.memory=512m

    def budget_line() -> re.Match | None:
        return BUDGET.search(jp.log_path.read_text(errors="replace"))

    wait_for(lambda: jp.proc.poll() is not None or budget_line() is not None, 180, "the budget line")
    found = budget_line()
    assert found, jp.log_path.read_text(errors="replace")[-3000:]
    partitions, per_range, cap = int(found[1]), float(found[2]), int(found[3].replace(",", ""))
    assert partitions == PARTITIONS
    assert 56 <= per_range < 100  # measured by the job: seven 8-byte columns and their arrays' slack
    # the rule's cap for these figures (the logged bytes/range is rounded to 0.1)
    assert cap == pytest.approx(size_history("512m", PARTITIONS, per_range, None).cap, rel=2e-3)
    produce_numbered(kafka_a.bootstrap, src, PARTITIONS, 500, 500)
    wait_for(lambda: _copied(kafka_b.bootstrap, f"a.{src}", 1000), 180, "the records mirrored")
    check_numbered(kafka_b.bootstrap, f"a.{src}", PARTITIONS, 1000)
    assert jp.stop() == 0


def _copied(bootstrap: str, remote: str, sent: int) -> bool:
    try:
        check_numbered(bootstrap, remote, PARTITIONS, sent)
    except AssertionError:
        return False
    return True


def test_a_history_that_cannot_fit_is_refused_naming_the_fields(kafka_a, topic, flowgroup, job) -> None:
    src = topic(kafka_a, partitions=PARTITIONS)
    jp = job(flowgroup(src, offsetHistory=50_000_000))  # 4 x 50 M ranges x ~60 bytes: some 12 GB, in 512m
    assert jp.proc.wait(180) == EXIT_REFUSED  # permanent: the operator records it and does not restart
    out = jp.log_path.read_text(errors="replace")
    line = next(x for x in out.splitlines() if x.startswith("sparkmirror: spec.spark.offsetHistory="))
    assert re.search(r"^sparkmirror: spec\.spark\.offsetHistory=50,000,000 ranges/partition needs [\d,.]+ MiB but "
                     r"25% of spec\.spark\.driver\.memory \(spark\.driver\.memory\)=512m is 128\.0 MiB for 4 source "
                     r"partitions at [\d.]+ bytes/range: set spec\.spark\.offsetHistory to at most [\d,]+ \(or leave "
                     r"it out to size it\), or spec\.spark\.driver\.memory \(spark\.driver\.memory\) to at least "
                     r"\d+m$", line), line
    assert "Traceback" not in out


def test_the_driver_hands_its_cap_to_the_progress_readers(kafka_a, kafka_b, topic, flowgroup) -> None:
    """What `Driver` does with the budget: the flow group's services and their live tails take the cap."""
    from sparkmirror.metrics import DriverServices, MirrorMonitor

    cfg = flowgroup(topic(kafka_a, partitions=PARTITIONS))
    services = DriverServices(cfg)
    m = next(iter(services.mirrors.values()))
    m.monitor = MirrorMonitor(cfg, m.mirror)
    try:
        assert m.monitor.tail.state.max_history == 200_000  # not sized yet: the former default
        services.size_history(12_345)
        assert services.config.offsetHistory == 12_345
        assert m.monitor.tail.state.max_history == 12_345
        assert MirrorMonitor(services.config, m.mirror).tail.state.max_history == 12_345  # made from now on
    finally:
        m.monitor.tail.close()
