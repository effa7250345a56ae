"""The operator's handoff decisions (rollout.py), pure: what it runs and where the Leases point, step by step."""
from __future__ import annotations

import json

from sparkmirror.resource.flowgroup import FlowGroupConfig, Predecessor
from sparkmirror.resource.model import UpgradeSpec
from sparkmirror.resource.names import LEASE_HOLDER, LEASE_REVOKED, lease_ready_key, lease_took_over_key
from sparkmirror.resource.rollout import next_generation
from sparkmirror_operator.observed import ANNOTATION_LAST_GENERATION, ANNOTATION_MOVED_AT, Observed, Worker
from sparkmirror_operator.rollout import plan_rollout
from sparkmirror_operator.takeovers import took_over

NOW = 1_800_000_000_000
UPGRADE = UpgradeSpec(readyTimeoutSeconds=60, handoffTimeoutSeconds=30)


def cfg(name: str = "g", version: str = "1", lanes: int = 2, topics: str = ".*", generation: int = 1,
        mirror: str = "a") -> FlowGroupConfig:
    return FlowGroupConfig.model_validate({
        "name": name, "resource": "ns/res", "clusters": [{"alias": "a", "bootstrapServers": "a:9092"},
                                                          {"alias": "b", "bootstrapServers": "b:9092"}],
        "mirrors": [{"name": mirror, "source": "a", "target": "b", "topics": topics}], "lanes": lanes,
        "worker": {"generation": generation, "version": version}})


def app(created_ms: int = NOW - 5_000, state: str = "RUNNING", error: str | None = None) -> dict:
    import datetime as dt

    ts = dt.datetime.fromtimestamp(created_ms / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")
    return {"metadata": {"creationTimestamp": ts},
            "status": {"applicationState": {"state": state, **({"errorMessage": error} if error else {})}}}


def lease(holder: int | None, *, renewed_ms: int | None = None, **annotations: str) -> dict:
    """A flow group's Lease naming `holder`; `renewed_ms`: its holder's last renewal (spec.renewTime)."""
    import datetime as dt

    ann = dict(annotations)
    if holder is not None:
        ann[LEASE_HOLDER] = str(holder)
    spec: dict = {"leaseDurationSeconds": 15}
    if renewed_ms is not None:
        spec["renewTime"] = dt.datetime.fromtimestamp(renewed_ms / 1000, dt.timezone.utc).isoformat() \
            .replace("+00:00", "Z")
    return {"metadata": {"annotations": ann}, "spec": spec}


def observed(workers: list[tuple[FlowGroupConfig, dict | None]], leases: dict[str, dict]) -> Observed:
    obs = Observed(leases=leases)
    for c, a in workers:
        obs.workers.setdefault(c.name, {})[c.worker.generation] = Worker(c, a)
    return obs


def gens(plan) -> list[tuple[str, int]]:
    return sorted((c.name, c.worker.generation) for c in plan.workers)


def test_first_generation_starts_at_once():
    p = plan_rollout([cfg()], Observed(), UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1)] and p.holders == {"g": 1} and not p.upgrading


def test_unchanged_keeps_running():
    p = plan_rollout([cfg(version="1")], observed([(cfg(), app())], {"g": lease(1)}), UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1)] and p.holders == {"g": 1} and not p.upgrading and not p.handoffs


def test_a_version_change_walks_standby_move_takeover():
    want = [cfg(version="2")]
    # 1. a standby generation beside the running one; the Lease stays
    p = plan_rollout(want, observed([(cfg(), app())], {"g": lease(1)}), UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1), ("g", 2)] and p.holders == {"g": 1}
    new = next(c for c in p.workers if c.worker.generation == 2)
    assert new.worker.version == "2" and new.worker.predecessors[0].generation == 1
    assert new.worker.predecessors[0].transactionalIds == {"b": ["sparkmirror.ns.res.g.a.lane-0",
                                                                 "sparkmirror.ns.res.g.a.lane-1"]}
    assert "standby" in p.upgrading[0]
    # 2. not ready yet: nothing moves
    p = plan_rollout(want, observed([(cfg(), app()), (new, app())], {"g": lease(1)}), UPGRADE, now_ms=NOW)
    assert p.holders == {"g": 1} and p.moved == set() and "0/1 ready" in p.upgrading[0]
    # 3. ready: the Lease moves to generation 2, both still run
    ready = {lease_ready_key(2): str(NOW)}
    p = plan_rollout(want, observed([(cfg(), app()), (new, app())], {"g": lease(1, **ready)}), UPGRADE, now_ms=NOW)
    assert p.holders == {"g": 2} and p.moved == {"g"} and gens(p) == [("g", 1), ("g", 2)]
    assert p.running["g"].worker.generation == 1  # generation 1 copies until 2 took over
    # 4. took over: generation 1 is dropped, the handoff recorded
    took = {lease_took_over_key(2): json.dumps({"atMs": NOW + 800, "tookMs": 300, "fenced": 2}),
            ANNOTATION_MOVED_AT: str(NOW)}
    p = plan_rollout(want, observed([(cfg(), app()), (new, app())], {"g": lease(2, **ready, **took)}), UPGRADE,
                     now_ms=NOW + 1000)
    assert gens(p) == [("g", 2)] and p.holders == {"g": 2} and not p.upgrading
    assert p.handoffs == [{"fromGeneration": 1, "toGeneration": 2, "fromFlowGroups": ["g"], "toFlowGroups": ["g"],
                           "version": "2", "takeoverMs": 300, "fencedTransactionalIds": 2,
                           "leaseToTakeoverMs": 800, "time": "2027-01-15T08:00:00Z"}]


def test_a_ready_report_counts_only_while_the_standby_s_driver_is_up():
    """A standby that reported ready, then failed (restarting: its warm-up died with its driver): the Lease does
    not move to it, and its report is dropped so that the restarted driver must report again."""
    want = [cfg(version="2")]
    new = next_generation(want[0], 2, [Predecessor(flowGroup="g", generation=1)])
    ready = {lease_ready_key(2): str(NOW - 2_000)}
    for state in ("FAILING", "PENDING_RERUN", "FAILED"):
        p = plan_rollout(want, observed([(cfg(), app()), (new, app(state=state))], {"g": lease(1, **ready)}),
                         UPGRADE, now_ms=NOW)
        assert p.holders == {"g": 1} and not p.moved and "0/1 ready" in p.upgrading[0], state
        assert p.stale_marks == {"g": [lease_ready_key(2)]}, state
    p = plan_rollout(want, observed([(cfg(), app()), (new, None)], {"g": lease(1, **ready)}), UPGRADE, now_ms=NOW)
    assert p.holders == {"g": 1} and not p.moved  # its application not there (yet, or any more)
    p = plan_rollout(want, observed([(cfg(), app()), (new, app())], {"g": lease(1, **ready)}), UPGRADE, now_ms=NOW)
    assert p.holders == {"g": 2} and p.moved == {"g"} and not p.stale_marks  # up: the Lease moves


def test_a_standby_that_never_gets_ready_is_rolled_back_and_not_retried():
    want = [cfg(version="2")]
    new = cfg(version="2", generation=2)
    obs = observed([(cfg(), app()), (new, app(NOW - 61_000, "SUBMITTED"))], {"g": lease(1)})
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1)] and p.holders == {"g": 1} and p.held_back
    assert p.rollback["generation"] == 2 and "not ready within spec.upgrade.readyTimeoutSeconds (60 s)" \
        in p.rollback["reason"] and "generation 1 keeps copying" in p.rollback["reason"]
    # the same spec again: held back, no new standby; a new spec tries again
    p2 = plan_rollout(want, observed([(cfg(), app())], {"g": lease(1)}), UPGRADE, now_ms=NOW,
                      rolled_back=p.rollback)
    assert gens(p2) == [("g", 1)] and p2.held_back
    p3 = plan_rollout([cfg(version="3")], observed([(cfg(), app())], {"g": lease(1)}), UPGRADE, now_ms=NOW,
                      rolled_back=p.rollback)
    assert gens(p3) == [("g", 1), ("g", 2)] and not p3.held_back


def test_a_split_hands_over_as_one_unit_and_fences_every_old_lane():
    old = cfg(lanes=3)
    want = [cfg("g-1", topics="t1"), cfg("g-2", topics="t2")]
    p = plan_rollout(want, observed([(old, app())], {"g": lease(1)}), UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1), ("g-1", 2), ("g-2", 2)]
    assert p.holders == {"g": 1, "g-1": None, "g-2": None}  # the new groups' Leases name nobody yet
    preds = {c.name: c.worker.predecessors for c in p.workers if c.worker.generation == 2}
    assert all(len(ps[0].transactionalIds["b"]) == 3 for ps in preds.values())
    new = [c for c in p.workers if c.worker.generation == 2]
    ready = {lease_ready_key(2): str(NOW)}
    leases = {"g": lease(1), "g-1": lease(None, **ready), "g-2": lease(None)}
    p = plan_rollout(want, observed([(old, app())] + [(c, app()) for c in new], leases), UPGRADE, now_ms=NOW)
    assert p.holders == {"g": 1, "g-1": None, "g-2": None}  # one of two ready: nothing moves
    leases["g-2"] = lease(None, **ready)
    p = plan_rollout(want, observed([(old, app())] + [(c, app()) for c in new], leases), UPGRADE, now_ms=NOW)
    assert p.holders == {"g": 2, "g-1": 2, "g-2": 2}  # the old group's Lease too: its driver drains
    took = {lease_took_over_key(2): json.dumps({"atMs": NOW, "tookMs": 100, "fenced": 3})}
    leases = {"g": lease(2), "g-1": lease(2, **took), "g-2": lease(2, **took)}
    p = plan_rollout(want, observed([(old, app())] + [(c, app()) for c in new], leases), UPGRADE, now_ms=NOW)
    assert gens(p) == [("g-1", 2), ("g-2", 2)] and "g" not in p.holders  # the old group's Lease goes
    assert p.handoffs[0]["fromFlowGroups"] == ["g"] and p.handoffs[0]["toFlowGroups"] == ["g-1", "g-2"]


def test_one_unit_at_a_time():
    want = [cfg("x", version="2", mirror="x"), cfg("y", version="2", mirror="y")]
    running = [(cfg("x", mirror="x"), app()), (cfg("y", mirror="y"), app())]
    p = plan_rollout(want, observed(running, {"x": lease(1), "y": lease(1)}), UPGRADE, now_ms=NOW)
    assert gens(p) == [("x", 1), ("x", 2), ("y", 1)]
    assert any("waits for another flow group" in u for u in p.upgrading)


def test_a_restart_annotation_rolls_like_a_change():
    p = plan_rollout([cfg()], observed([(cfg(), app())], {"g": lease(1)}), UPGRADE, now_ms=NOW, restart="r1")
    assert gens(p) == [("g", 1), ("g", 2)]


def test_a_rollback_rides_on_the_leases_so_a_stale_status_does_not_start_the_standby_again():
    """The rollback is applied (standby removed) before the status says so: a reconcile that read the resource
    in between must still hold the spec back, from what the Leases carry."""
    from pathlib import Path

    import yaml

    from sparkmirror_operator.render import CONFIG_KEY, LABEL_FLOW_GROUP, LABEL_GENERATION, Settings, render

    src = yaml.safe_load((Path(__file__).parent / "data" / "render" / "two-groups-scram.input.yaml").read_text())
    src["spec"].update(upgrade={"readyTimeoutSeconds": 15, "maxConcurrentGroups": 2}, state="running")

    def observe(objects: list[dict], app_created_ms: int) -> Observed:
        obs = Observed()
        for o in objects:
            labels = o["metadata"].get("labels") or {}
            if o["kind"] == "ConfigMap" and CONFIG_KEY in (o.get("data") or {}):
                c = FlowGroupConfig.from_yaml(o["data"][CONFIG_KEY])
                obs.workers.setdefault(c.name, {})[c.worker.generation] = Worker(c)
        for o in objects:
            labels = o["metadata"].get("labels") or {}
            if o["kind"] == "SparkApplication":
                a = {**o, "metadata": {**o["metadata"], **app(app_created_ms, "SUBMITTED")["metadata"]}}
                obs.workers[labels[LABEL_FLOW_GROUP]][int(labels.get(LABEL_GENERATION, 1))].app = a
            elif o["kind"] == "Lease":
                obs.leases[labels[LABEL_FLOW_GROUP]] = o
        return obs

    def generations(objects: list[dict]) -> list[tuple[str, str]]:
        return sorted((o["metadata"]["labels"][LABEL_FLOW_GROUP], o["metadata"]["labels"].get(LABEL_GENERATION, "1"))
                      for o in objects if o["kind"] == "SparkApplication")

    first = render(src, Settings(), now_ms=NOW).objects
    src["spec"]["version"] = "9.9"
    standby = render(src, Settings(), observed=observe(first, NOW), now_ms=NOW).objects
    assert len(generations(standby)) == 2 * len(generations(first))
    rolled = render(src, Settings(), observed=observe(standby, NOW), now_ms=NOW + 16_000)
    assert rolled.rollout.rollback and generations(rolled.objects) == generations(first)
    leases = [o for o in rolled.objects if o["kind"] == "Lease"]
    assert leases and all(json.loads(o["metadata"]["annotations"]["sparkmirror.io/rolled-back"])
                          == rolled.rollout.rollback for o in leases)
    # a reconcile whose resource was read before the status said "rolled back" (rolled_back=None)
    again = render(src, Settings(), observed=observe(rolled.objects, NOW), now_ms=NOW + 17_000, rolled_back=None)
    assert generations(again.objects) == generations(first) and again.rollout.held_back


def test_a_failed_over_group_is_not_handed_over_until_undone():
    """A spec change to a flow group stopped by spec.failover makes no standby (it would never get ready: the
    group runs no application); once undone, the handoff starts as usual."""
    obs = observed([(cfg(), None)], {"g": lease(1)})
    p = plan_rollout([cfg(version="2")], obs, UPGRADE, now_ms=NOW, failed_over=frozenset({"a"}))
    assert gens(p) == [("g", 1)] and p.holders == {"g": 1} and not p.upgrading
    obs = observed([(cfg(), app())], {"g": lease(1)})
    p = plan_rollout([cfg(version="2")], obs, UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1), ("g", 2)] and p.upgrading


def _split(took_by: list[str], moved_ms: int = NOW - 31_000):
    """Generation 1 of `g` split into `g-1` and `g-2` (generation 2), the Leases moved; `took_by` took over."""
    old = cfg(lanes=3)
    want = [cfg("g-1", topics="t1"), cfg("g-2", topics="t2")]
    new = [next_generation(c, 2, [Predecessor(flowGroup="g", generation=1)]) for c in want]
    took = json.dumps({"atMs": NOW - 1_000, "tookMs": 100, "fenced": 3})
    leases = {"g": lease(2, **{ANNOTATION_MOVED_AT: str(moved_ms)})}
    for c in want:
        marks = {lease_ready_key(2): str(NOW - 40_000), ANNOTATION_MOVED_AT: str(moved_ms)}
        if c.name in took_by:
            marks[lease_took_over_key(2)] = took
        leases[c.name] = lease(2, **marks)
    return want, observed([(old, app())] + [(c, app()) for c in new], leases)


def test_a_split_is_not_done_until_every_successor_took_over():
    """One of two successors took over: the old group keeps running (it is what still copies the other's
    partitions), Upgrading stays, and the handoff timeout is still checked."""
    want, obs = _split(["g-1"], moved_ms=NOW - 10_000)
    assert not took_over(obs, 2)
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1), ("g-1", 2), ("g-2", 2)]
    assert p.running["g"].worker.generation == 1 and "g-1" not in p.running
    assert p.holders == {"g": 2, "g-1": 2, "g-2": 2} and not p.handoffs and not p.rollback
    assert any("1/2 took over" in u for u in p.upgrading)
    # both took over: the old group is pruned with its Lease, Upgrading clears, the handoff is recorded once
    want, obs = _split(["g-1", "g-2"])
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)
    assert gens(p) == [("g-1", 2), ("g-2", 2)] and "g" not in p.holders
    assert not p.upgrading and not p.rollback
    assert [(h["fromFlowGroups"], h["toFlowGroups"]) for h in p.handoffs] == [(["g"], ["g-1", "g-2"])]


def test_a_split_whose_successor_config_went_missing_still_waits_for_it():
    """The successors are also the groups that reported on their own Lease: a lost ConfigMap of one does not
    make the other's takeover count for the whole generation."""
    want, obs = _split(["g-1"], moved_ms=NOW - 10_000)
    del obs.workers["g-2"]
    assert not took_over(obs, 2)
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)
    assert ("g", 1) in gens(p) and ("g-2", 2) in gens(p) and p.upgrading


def test_a_merge_prunes_both_old_groups_once_the_successor_took_over():
    olds = [cfg("x", topics="t1"), cfg("y", topics="t2")]
    want = [cfg("z")]
    new = next_generation(want[0], 2, [Predecessor(flowGroup=o.name, generation=1) for o in olds])
    leases = {"x": lease(2), "y": lease(2), "z": lease(2, **{lease_ready_key(2): str(NOW)})}
    obs = observed([(o, app()) for o in olds] + [(new, app())], leases)
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)
    assert gens(p) == [("x", 1), ("y", 1), ("z", 2)] and p.upgrading and "0/1 took over" in p.upgrading[0]
    leases["z"] = lease(2, **{lease_took_over_key(2): json.dumps({"atMs": NOW, "tookMs": 90, "fenced": 4})})
    p = plan_rollout(want, observed([(o, app()) for o in olds] + [(new, app())], leases), UPGRADE, now_ms=NOW)
    assert gens(p) == [("z", 2)] and p.holders == {"z": 2} and not p.upgrading
    assert p.handoffs[0]["fromFlowGroups"] == ["x", "y"] and p.handoffs[0]["toFlowGroups"] == ["z"]


def test_generation_numbers_are_never_given_out_again_after_a_rollback():
    """A rolled-back standby's number stays taken (the high-water mark on the Leases, or its leftover report):
    the next standby gets a fresh one, so the leftover `ready.g2` cannot move the Lease to it while cold."""
    want = [cfg(version="2")]
    obs = observed([(cfg(), app()), (cfg(version="2", generation=2), app(NOW - 61_000, "SUBMITTED"))],
                   {"g": lease(1)})
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)
    assert p.rollback and gens(p) == [("g", 1)] and p.last_generation == 2
    # its driver reported ready just as it was removed: the report of a gone generation is dropped
    late = observed([(cfg(), app())], {"g": lease(1, **{lease_ready_key(2): str(NOW),
                                                         ANNOTATION_LAST_GENERATION: "2"})})
    assert plan_rollout(want, late, UPGRADE, now_ms=NOW, rolled_back=p.rollback).stale_marks == \
        {"g": [lease_ready_key(2)]}
    # the Lease as the operator leaves it: the mark dropped, the high-water mark recorded; a new spec
    after = observed([(cfg(), app())], {"g": lease(1, **{ANNOTATION_LAST_GENERATION: "2"})})
    p = plan_rollout([cfg(version="3")], after, UPGRADE, now_ms=NOW, rolled_back=p.rollback)
    assert gens(p) == [("g", 1), ("g", 3)] and p.holders == {"g": 1} and p.last_generation == 3
    # without the high-water mark (a Lease written before it existed), the leftover report keeps 2 taken,
    # and while its standby is cold the leftover says nothing of generation 3: the Lease does not move
    leftover = observed([(cfg(), app())], {"g": lease(1, **{lease_ready_key(2): str(NOW)})})
    p = plan_rollout([cfg(version="3")], leftover, UPGRADE, now_ms=NOW, rolled_back=p.rollback)
    assert ("g", 3) in gens(p) and ("g", 2) not in gens(p) and p.stale_marks == {"g": [lease_ready_key(2)]}
    standby = next(c for c in p.workers if c.worker.generation == 3)
    p = plan_rollout([cfg(version="3")], observed([(cfg(), app()), (standby, app())],
                                                  {"g": lease(1, **{lease_ready_key(2): str(NOW)})}),
                     UPGRADE, now_ms=NOW)
    assert p.holders == {"g": 1} and not p.moved and "0/1 ready" in p.upgrading[0]


def test_reports_of_handed_over_generations_are_dropped():
    """After a takeover the predecessor's reports go; the running generation's stay (its handoff record is
    derived from them on every look)."""
    took = json.dumps({"atMs": NOW, "tookMs": 100, "fenced": 2})
    new = next_generation(cfg(version="2"), 2, [Predecessor(flowGroup="g", generation=1)])
    leases = {"g": lease(2, **{lease_ready_key(1): "1", lease_took_over_key(1): took,
                               lease_ready_key(2): "2", lease_took_over_key(2): took})}
    p = plan_rollout([cfg(version="2")], observed([(cfg(), app()), (new, app())], leases), UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 2)] and p.handoffs
    assert p.stale_marks == {"g": sorted([lease_ready_key(1), lease_took_over_key(1)])}


def test_the_restart_annotation_names_flow_groups():
    from sparkmirror_operator.restarts import restart_request

    groups = ["east", "west"]
    assert restart_request("", groups) == (frozenset(), "")
    assert restart_request("east@3", groups) == (frozenset({"east"}), "3")
    assert restart_request("east, west@x", groups) == (frozenset(groups), "x")
    assert restart_request("all@7", groups) == restart_request("@7", groups) == (frozenset(groups), "7")
    assert restart_request("west", groups) == (frozenset({"west"}), "west")
    # any other value means what it meant before flow groups could be named: all of them
    assert restart_request("2024-06-01T10:00:00Z", groups) == (frozenset(groups), "2024-06-01T10:00:00Z")
    assert restart_request("nosuch@1", groups) == (frozenset(), "1")


def test_a_restart_rolls_only_the_flow_groups_it_names():
    x, y = cfg("x", mirror="x"), cfg("y", mirror="y")
    running = observed([(x, app()), (y, app())], {"x": lease(1), "y": lease(1)})
    p = plan_rollout([x, y], running, UPGRADE, now_ms=NOW, restart="y@1")
    assert gens(p) == [("x", 1), ("y", 1), ("y", 2)]
    new_y = next(c for c in p.workers if c.worker.generation == 2)
    assert new_y.worker.version == "1+restart.1"
    # y restarted with token 1; naming x next keeps y's token: y does not roll again, x does
    y2 = next_generation(new_y, 2, [])
    after = observed([(x, app()), (y2, app())], {"x": lease(1), "y": lease(2)})
    p = plan_rollout([x, y], after, UPGRADE, now_ms=NOW, restart="x@2")
    assert gens(p) == [("x", 1), ("x", 3), ("y", 2)]
    # the annotation removed: nothing rolls (each group keeps what it runs)
    p = plan_rollout([x, y], after, UPGRADE, now_ms=NOW, restart="")
    assert gens(p) == [("x", 1), ("y", 2)] and not p.upgrading


def test_the_handoff_record_carries_the_pause_the_new_generation_measured():
    """The visible pause (the gap between the old generation's last commit and the new one's first, which the
    drivers report with their takeover), apart from the longest a record of the first epoch waited, and the
    records that epoch copied; a driver that reports no pause leaves pauseMs out rather than guessing it."""
    new = next_generation(cfg(version="2"), 2, [Predecessor(flowGroup="g", generation=1)])
    first = {"atMs": NOW + 300, "tookMs": 200, "fenced": 2, "firstEpochMs": NOW + 6_400,
             "firstEpochRecords": 2_750, "latencyMaxMs": 12_400}
    for report, pause in (({**first, "pauseMs": 1_100}, 1_100), (first, None)):
        leases = {"g": lease(2, **{lease_took_over_key(2): json.dumps(report), ANNOTATION_MOVED_AT: str(NOW)})}
        p = plan_rollout([cfg(version="2")], observed([(cfg(), app()), (new, app())], leases), UPGRADE,
                         now_ms=NOW + 2_000)
        assert p.handoffs[0].get("pauseMs") == pause
        assert p.handoffs[0]["firstEpochLatencyMaxMs"] == 12_400 and p.handoffs[0]["firstEpochRecords"] == 2_750
        assert p.handoffs[0]["leaseToTakeoverMs"] == 300


def _moved(state: str | None, moved_ms: int = NOW - 5_000, renewed_ms: int | None = NOW - 1_000):
    """Generation 2 (version 2, 3 lanes) of `g`: the Lease moved to it at `moved_ms`, no took-over yet, renewed by
    it at `renewed_ms`; its application in `state` (None: gone)."""
    want = [cfg(version="2", lanes=3)]
    new = next_generation(want[0], 2, [Predecessor(flowGroup="g", generation=1)])
    leases = {"g": lease(2, renewed_ms=renewed_ms, **{lease_ready_key(2): str(NOW - 9_000),
                                                      ANNOTATION_MOVED_AT: str(moved_ms)})}
    return want, observed([(cfg(), app()), (new, None if state is None else app(NOW - 20_000, state))], leases)


def test_a_successor_that_fails_after_the_lease_moved_is_rolled_back_and_the_lease_moves_back():
    want, obs = _moved("FAILED")
    obs.workers["g"][2].app["status"]["applicationState"]["errorMessage"] = "driver container failed with ExitCode: 1"
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1)] and p.holders == {"g": 1} and p.moved == {"g"}
    assert p.running["g"].worker.generation == 1 and p.held_back and not p.upgrading
    assert p.rollback["leaseMovedBack"] and p.rollback["generation"] == 2
    assert p.rollback["reason"] == (
        "generation 2 of g was rolled back after the Lease moved to it: its driver stopped before its first commit "
        "(g: FAILED (driver container failed with ExitCode: 1)); the Lease moved back, generation 1 copies again")
    revoked = json.loads(p.revoked["g"])  # what generation 1 fences before it copies again: 2's three lanes
    assert revoked == {"generation": 2, "flowGroups": ["g"], "transactionalIds": {
        "b": [f"sparkmirror.ns.res.g.a.lane-{i}" for i in range(3)]}}
    assert p.stale_marks == {"g": [lease_ready_key(2)]}
    # the next look: generation 2 is gone, the Lease names 1 and still says what was revoked; nothing restarts
    leases = {"g": lease(1, **{LEASE_REVOKED: p.revoked["g"], "sparkmirror.io/rolled-back": json.dumps(p.rollback),
                               ANNOTATION_LAST_GENERATION: "2"})}
    p2 = plan_rollout(want, observed([(cfg(), app())], leases), UPGRADE, now_ms=NOW + 1_000, rolled_back=p.rollback)
    assert gens(p2) == [("g", 1)] and p2.holders == {"g": 1} and p2.held_back and p2.revoked == p.revoked
    assert not p2.moved and p2.rollback["leaseMovedBack"]
    # a new spec: generation 3 in standby; once it holds the Lease, the record of 2's revocation goes
    p3 = plan_rollout([cfg(version="3")], observed([(cfg(), app())], leases), UPGRADE, now_ms=NOW + 2_000,
                      rolled_back=p.rollback)
    assert gens(p3) == [("g", 1), ("g", 3)] and p3.holders == {"g": 1} and "g" in p3.revoked
    new3 = next(c for c in p3.workers if c.worker.generation == 3)
    leases3 = {"g": lease(3, **{LEASE_REVOKED: p.revoked["g"], lease_ready_key(3): str(NOW)})}
    p4 = plan_rollout([cfg(version="3")], observed([(cfg(), app()), (new3, app())], leases3), UPGRADE,
                      now_ms=NOW + 3_000)
    assert p4.holders == {"g": 3} and p4.revoked == {}


def test_a_successor_whose_application_is_gone_is_rolled_back():
    want, obs = _moved(None)
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1)] and p.holders == {"g": 1} and "g: its application is gone" in p.rollback["reason"]


def test_a_successor_that_does_not_commit_within_the_handoff_timeout_is_rolled_back():
    want, obs = _moved("RUNNING", moved_ms=NOW - 29_000)
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)  # within the 30 s: the hot spare waits
    assert gens(p) == [("g", 1), ("g", 2)] and p.holders == {"g": 2} and not p.rollback and not p.revoked
    assert p.running["g"].worker.generation == 1 and "0/1 took over" in p.upgrading[0]
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW + 2_000)
    assert gens(p) == [("g", 1)] and p.holders == {"g": 1} and p.rollback["leaseMovedBack"]
    assert "did not commit its first epoch within spec.upgrade.handoffTimeoutSeconds (30 s; waiting for g)" \
        in p.rollback["reason"]
    # still starting (no state yet) or restarting is no failure; a restart after a failure is
    for state in ("SUBMITTED", ""):
        assert not plan_rollout(*_moved(state), UPGRADE, now_ms=NOW).rollback
    assert plan_rollout(*_moved("PENDING_RERUN"), UPGRADE, now_ms=NOW).rollback


def test_a_successor_that_stops_renewing_the_lease_is_rolled_back_before_the_handoff_timeout():
    """A frozen successor (its application RUNNING, nothing failed) is caught by its renewals alone: silent for
    longer than leaseDurationSeconds (15 s), well within handoffTimeoutSeconds (30 s)."""
    want, obs = _moved("RUNNING", moved_ms=NOW - 20_000, renewed_ms=NOW - 14_000)
    assert not plan_rollout(want, obs, UPGRADE, now_ms=NOW).rollback  # 14 s: within the duration
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW + 2_000)  # 16 s silent, 22 s after the move
    assert gens(p) == [("g", 1)] and p.holders == {"g": 1} and p.moved == {"g"} and p.rollback["leaseMovedBack"]
    assert "its driver stalled before its first commit (g: it has not renewed its Lease for 16 s " \
        "(leaseDurationSeconds 15))" in p.rollback["reason"], p.rollback
    assert json.loads(p.revoked["g"])["generation"] == 2
    # never renewed since the move: the move is its last sign of life (the renewal before it was generation 1's)
    want, obs = _moved("RUNNING", moved_ms=NOW - 16_000, renewed_ms=NOW - 17_000)
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)
    assert "it has not renewed its Lease since the Lease moved to it 16 s" in p.rollback["reason"], p.rollback
    want, obs = _moved("RUNNING", moved_ms=NOW - 10_000, renewed_ms=None)
    assert not plan_rollout(want, obs, UPGRADE, now_ms=NOW).rollback  # 10 s: it may not have renewed yet


def test_a_holder_that_stops_renewing_outside_a_handoff_is_a_problem_not_a_move():
    """Nobody could take its place: the Lease stays, the status says why (Degraded, LeaseNotRenewed)."""
    def plan(renewed_ms: int | None, state: str = "RUNNING", moved_ms: int = NOW - 600_000):
        leases = {"g": lease(1, renewed_ms=renewed_ms, **{ANNOTATION_MOVED_AT: str(moved_ms)})}
        return plan_rollout([cfg()], observed([(cfg(), app(state=state))], leases), UPGRADE, now_ms=NOW)

    p = plan(NOW - 16_000)
    assert p.holders == {"g": 1} and not p.moved and gens(p) == [("g", 1)]
    assert p.silent == {"g": "flow group g: generation 1 holds the Lease but it has not renewed its Lease for 16 s "
                              "(leaseDurationSeconds 15): its driver is not running, cannot reach the API server, or "
                              "is stalled"} and not p.app_problems  # (the status says it: holders.silence_explained)
    assert not plan(NOW - 3_000).silent  # renewing
    assert not plan(None, "SUBMITTED").silent  # not running yet: its application says so
    assert not plan(None, "FAILING").silent
    assert "g" in plan(None).silent  # running for 10 min, never renewed


def test_a_split_is_rolled_back_as_a_whole_when_one_successor_fails():
    """One successor took over, the other failed: both are removed (they share the old group's partitions), the
    old group's Lease moves back and names both successors' lanes to fence; the new groups' Leases name nobody."""
    want, obs = _split(["g-1"], moved_ms=NOW - 10_000)
    obs.workers["g-2"][2].app = app(NOW - 60_000, "FAILING", "driver container failed with ExitCode: 1")
    p = plan_rollout(want, obs, UPGRADE, now_ms=NOW)
    assert gens(p) == [("g", 1)] and p.holders == {"g": 1, "g-1": None, "g-2": None}
    assert p.running == {"g": p.workers[0]} and p.moved == {"g"}
    revoked = json.loads(p.revoked["g"])
    assert revoked["flowGroups"] == ["g-1", "g-2"] and len(revoked["transactionalIds"]["b"]) == 4
    assert set(p.revoked) == {"g", "g-1", "g-2"} and "g-2: FAILING" in p.rollback["reason"]
