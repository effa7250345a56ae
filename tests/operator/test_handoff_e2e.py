"""Rolling upgrades by worker-group handoff, end to end: the operator on the real API server, the local runner
playing the Spark operator (each worker generation is its own Spark driver process), real Kafka. While records
flow at a steady rate the spec changes (version and parallelism, a flow-group split, the merge back); then a
generation that can never start is rolled back. Every record is counted on the target: none missing, none twice.
Each handoff's pauseMs on the status is checked against the gap a consumer of the target saw.
"""
from __future__ import annotations

import time

import pytest

from bench.handoff import Arrivals
from sparkmirror_dev.testing import NumberedProducer, check_numbered, count_records

from .conftest import KMM2, condition as _cond, kmm2_status as _status, merge_patch as _patch, wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.kafka, pytest.mark.spark, pytest.mark.minutes(7), pytest.mark.solo]


@pytest.mark.timeout(1500)  # three handoffs, each a new Spark driver (two for the split), and a rollback, on 2 cores
def test_handoffs_and_a_rollback_lose_and_repeat_nothing(operator, kapi, namespace, kafka_a, kafka_b, topic,
                                                         tmp_path, figure) -> None:
    from tests.support.spark_runner import LocalSparkRunner

    t1, t2 = topic(kafka_a, partitions=3), topic(kafka_a, partitions=3)
    name = "roll"
    body = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2, "metadata": {"name": name, "namespace": namespace},
            "spec": {"version": "1.0",
                     "target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                     "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                                  "topicsPattern": f"{t1}|{t2}",
                                  "sourceConnector": {"config": {"refresh.topics.interval.seconds": 2}},
                                  "checkpointConnector": {"config": {"emit.checkpoints.enabled": "false"}}}],
                     "spark": {"parallelism": 2, "epochSeconds": 5, "executor": {"instances": 1}},
                     # three Spark drivers start at once for the split, beside two Kafka clusters and the API
                     # server on 2 cores: a standby may take minutes to be ready there
                     "upgrade": {"readyTimeoutSeconds": 360, "handoffTimeoutSeconds": 60}}}
    producers = [NumberedProducer(kafka_a.bootstrap, t, rate=50) for t in (t1, t2)]
    steps = [
        # one handoff for both: the lanes change across it, so the old lanes' ids are fenced by the new ones
        ("version 1.0 -> 2.0, parallelism 2 -> 3", {"spec": {"version": "2.0", "spark": {"parallelism": 3}}}),
        ("split into two flow groups", {"spec": {"flowGroups": [
            {"name": "one", "mirrors": ["a"], "topicsPattern": t1},
            {"name": "two", "mirrors": ["a"], "topicsPattern": t2}]}}),
        ("merge back", {"spec": {"flowGroups": None}}),
    ]
    timings = []
    arrivals = [Arrivals(kafka_b.bootstrap, f"a.{t}") for t in (t1, t2)]  # when records become visible
    windows: list[tuple[int, int, dict]] = []  # (patch, handoff recorded) in wall-clock ms, the record
    with LocalSparkRunner(kapi, namespace, tmp_path / "runner", missing_images=frozenset({"no-such-image"})) \
            as runner:
        for p in producers:
            p.start()
        try:
            kapi.create(body)
            wait_for("copying", lambda: count_records(kafka_b.bootstrap, f"a.{t1}", 20) > 100, timeout=240,
                     interval=2.0)
            for a in arrivals:
                a.start()
            for i, (what, patch) in enumerate(steps, start=1):
                t0, patched_ms = time.monotonic(), int(time.time() * 1000)
                _patch(kapi, namespace, name, patch)

                def handed_over(i=i):
                    st = _status(kapi, namespace, name)
                    return len(st.get("handoffs") or []) >= i and _cond(st, "Upgrading").get("status") == "False" \
                        and st

                try:
                    st = wait_for(f"handoff {i}: {what}", handed_over, timeout=480, interval=1.0)
                except AssertionError as e:  # say where it stood: the conditions, the rollback, the runner
                    st = _status(kapi, namespace, name)
                    raise AssertionError(f"{e}; conditions: {st.get('conditions')}; rollback: {st.get('rollback')}; "
                                         f"runner errors: {runner.errors}") from None
                timings.append((what, round(time.monotonic() - t0), st["handoffs"][-1]))
                windows.append((patched_ms, int(time.time() * 1000), st["handoffs"][-1]))
                assert not runner.errors, runner.errors
            gens = {g["name"]: g["workerGeneration"] for g in st["flowGroups"]}
            assert gens == {"a": 4}, st["flowGroups"]  # 1; then 2, 3 (the split) and 4 (the merge)
        finally:
            sent = [p.stop() for p in producers]
        # a generation that can never start (its image is nowhere): rolled back, the running one copies on
        _patch(kapi, namespace, name, {"spec": {"spark": {"image": "no-such-image"},
                                                "upgrade": {"readyTimeoutSeconds": 15}}})
        st = wait_for("rollback", lambda: (s := _status(kapi, namespace, name)).get("rollback") and
                      _cond(s, "Upgrading").get("reason") == "RolledBack" and s, timeout=180, interval=1.0)
        assert "not ready within spec.upgrade.readyTimeoutSeconds (15 s)" in st["rollback"]["reason"]
        for t, n in zip((t1, t2), sent):
            wait_for(f"a.{t} to catch up", lambda t=t, n=n: count_records(kafka_b.bootstrap, f"a.{t}", 20) >= 3 * n,
                     timeout=240, interval=2.0)
        time.sleep(3)  # a duplicate would land after the count was reached
        for a in arrivals:
            a.stop()
        apps = kapi.list("SparkApplication", namespace)
        assert [a["spec"].get("image") for a in apps] != ["no-such-image"] and len(apps) == 1
    for t, n in zip((t1, t2), sent):
        check_numbered(kafka_b.bootstrap, f"a.{t}", 3, n)
    # the status' pause is the one a reader of the target sees: the longest gap in either topic's arrivals
    # between the patch and the handoff recorded (commits come every ~100 ms otherwise), within what lies
    # between the lanes stamping commitMs and a consumer seeing the committed records
    for patched_ms, done_ms, rec in windows:
        visible = max(a.pause_ms(patched_ms, done_ms) for a in arrivals)
        assert abs(rec["pauseMs"] - visible) <= 1_000 + visible // 4, (visible, rec)
    figure("operator_handoffs", "\n  ".join(
        [f"{len(timings)} handoffs through the operator, {sum(sent) * 3} records, 0 missing, 0 duplicated:"]
        + [f"{what}: {secs} s from the patch to the handoff recorded; {rec}" for what, secs, rec in timings]
        + [f"visible pauses {[max(a.pause_ms(p, d) for a in arrivals) for p, d, _r in windows]} ms, status "
           f"pauseMs {[r['pauseMs'] for _p, _d, r in windows]} ms"]))
