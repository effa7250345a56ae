"""The job's exit contract as the operator applies it (rollout.py, render.py), pure: a permanent refusal is not
run again and the resource says why; an exit 0 of a generation nothing took over is submitted again; a
standby that refuses is rolled back at once."""
from __future__ import annotations

import json

from sparkmirror.inputs import USAGE_EXIT
from sparkmirror.resource.names import EXIT_REFUSED, EXIT_STOPPED, PERMANENT_EXIT_CODES
from sparkmirror_operator.restarts import ANNOTATION_REFUSED, RESUBMIT_AFTER_SECONDS
from sparkmirror_operator.rollout import plan_rollout

from .test_rollout import NOW, UPGRADE, app, cfg, gens, lease, observed


def failed(code: int, state: str = "FAILING") -> dict:
    """An application as the Kubeflow Spark operator reports a failed driver."""
    return app(NOW - 5_000, state, f"driver container failed with ExitCode: {code}, Reason: Error")


def test_the_exit_codes_are_the_jobs():
    assert EXIT_REFUSED == USAGE_EXIT and EXIT_STOPPED not in PERMANENT_EXIT_CODES and 1 not in PERMANENT_EXIT_CODES


def test_a_permanent_refusal_is_not_run_again_and_the_resource_says_why():
    p = plan_rollout([cfg()], observed([(cfg(), failed(EXIT_REFUSED))], {"g": lease(1)}), UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1)] and p.no_application == {("g", 1)}  # its config stays, no application
    assert p.refused["g"]["generation"] == 1 and p.refused["g"]["exitCode"] == 2
    reason, message = p.app_problems[0]
    assert reason == "ApplicationRefused" and "exited with code 2" in message and "sparkmirror.io/restart: g@" \
        in message
    # the application is gone now: the record on the Lease keeps it from being started again
    record = json.dumps(p.refused["g"])
    p = plan_rollout([cfg()], observed([(cfg(), None)], {"g": lease(1, **{ANNOTATION_REFUSED: record})}),
                     UPGRADE, now_ms=NOW)
    assert p.no_application == {("g", 1)} and p.refused["g"]["exitCode"] == 2
    # a restart of that group makes a new generation, which starts at once (nothing copies) and is not refused
    p = plan_rollout([cfg()], observed([(cfg(), None)], {"g": lease(1, **{ANNOTATION_REFUSED: record})}),
                     UPGRADE, now_ms=NOW, restart="g@1")
    assert ("g", 2) in gens(p) and p.holders["g"] == 2 and not p.refused and not p.no_application


def test_a_refusal_says_the_jobs_words_from_its_lease():
    """The Spark operator's errorMessage carries only the exit code; the job's record on its Lease
    (names.LEASE_FAILURE) carries why, and the refusal recorded on the Lease keeps those words."""
    from sparkmirror.resource.names import LEASE_FAILURE

    words = "spec.spark.offsetHistory=100,000,000 ranges/partition needs 4,577.6 MiB but the driver has 128 MiB"
    said = json.dumps({"generation": 1, "exitCode": EXIT_REFUSED, "message": words})
    p = plan_rollout([cfg()], observed([(cfg(), failed(EXIT_REFUSED))], {"g": lease(1, **{LEASE_FAILURE: said})}),
                     UPGRADE, now_ms=NOW)
    assert p.refused["g"]["reason"] == words and words in p.app_problems[0][1]
    other = json.dumps({"generation": 1, "exitCode": 4, "message": "too few brokers"})  # another exit's words
    p = plan_rollout([cfg()], observed([(cfg(), failed(EXIT_REFUSED))], {"g": lease(1, **{LEASE_FAILURE: other})}),
                     UPGRADE, now_ms=NOW)
    assert p.refused["g"]["reason"] == "driver container failed with ExitCode: 2, Reason: Error"


def test_an_ordinary_failure_is_left_to_the_spark_operators_back_off():
    p = plan_rollout([cfg()], observed([(cfg(), failed(1))], {"g": lease(1)}), UPGRADE, now_ms=NOW)
    assert not p.no_application and not p.refused and not p.resubmit and not p.app_problems


def test_an_exit_0_nothing_took_over_is_submitted_again_at_most_once_a_minute():
    young = app(NOW - 5_000, "COMPLETED")
    p = plan_rollout([cfg()], observed([(cfg(), young)], {"g": lease(1)}), UPGRADE, now_ms=NOW)
    assert not p.resubmit and p.app_problems[0][0] == "ApplicationStopped"
    old = app(NOW - RESUBMIT_AFTER_SECONDS * 1000, "COMPLETED")
    p = plan_rollout([cfg()], observed([(cfg(), old)], {"g": lease(1)}), UPGRADE, now_ms=NOW)
    assert p.resubmit == [("g", 1)] and not p.app_problems
    # an old generation that handed over and exited 0 (the Lease names its successor) is not
    new = cfg(version="2", generation=2)
    p = plan_rollout([cfg(version="2")], observed([(cfg(), old), (new, app())], {"g": lease(2)}), UPGRADE,
                     now_ms=NOW)
    assert not p.resubmit


def test_a_standby_that_refuses_is_rolled_back_at_once():
    new = cfg(version="2", generation=2)
    obs = observed([(cfg(), app()), (new, failed(EXIT_REFUSED))], {"g": lease(1)})
    p = plan_rollout([cfg(version="2")], obs, UPGRADE, now_ms=NOW)  # well within readyTimeoutSeconds
    assert gens(p) == [("g", 1)] and p.held_back
    assert "refused to run (exit code 2" in p.rollback["reason"] and "generation 1 keeps copying" \
        in p.rollback["reason"]


def test_the_application_says_the_contract_in_its_restart_policy():
    from pathlib import Path

    import yaml

    from sparkmirror_operator.render import Settings, render
    from sparkmirror_operator.status import build_status

    src = yaml.safe_load((Path(__file__).parent / "data" / "render" / "two-groups-scram.input.yaml").read_text())
    src["spec"]["state"] = "running"
    apps = [o for o in render(src, Settings(), now_ms=NOW).objects if o["kind"] == "SparkApplication"]
    assert apps and all(a["spec"]["restartPolicy"]["type"] == "OnFailure" and
                        a["spec"]["restartPolicy"]["onFailureRetries"] > 0 for a in apps)
    # a refused group: no application rendered, the record on its Lease, the status naming it
    from sparkmirror_operator.observed import Observed, Worker
    from sparkmirror.resource.flowgroup import FlowGroupConfig
    from sparkmirror_operator.render import CONFIG_KEY, LABEL_FLOW_GROUP

    first = render(src, Settings(), now_ms=NOW).objects
    obs = Observed()
    for o in first:
        if o["kind"] == "ConfigMap" and CONFIG_KEY in (o.get("data") or {}):
            c = FlowGroupConfig.from_yaml(o["data"][CONFIG_KEY])
            obs.workers.setdefault(c.name, {})[c.worker.generation] = Worker(c, failed(2) if c.name == "west"
                                                                               else app())
        elif o["kind"] == "Lease":
            obs.leases[o["metadata"]["labels"][LABEL_FLOW_GROUP]] = o
    out = render(src, Settings(), observed=obs, now_ms=NOW)
    names = {o["metadata"]["name"] for o in out.objects if o["kind"] == "SparkApplication"}
    assert names == {"dc-mirror-east-orders"}
    west = next(o for o in out.objects if o["kind"] == "Lease" and o["metadata"]["name"] == "dc-mirror-west")
    assert json.loads(west["metadata"]["annotations"][ANNOTATION_REFUSED])["exitCode"] == 2
    st = build_status(name="dc-mirror", generation=1, plan=out.plan, apps={}, lags=None, problems=[], old=None,
                      rollout=out.rollout)
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "ApplicationRefused" and "west" in degraded["message"]
    stalled = next(c for c in st["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True"
