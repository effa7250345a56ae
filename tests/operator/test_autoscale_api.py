"""Autoscaling on the real API server and real Kafka, the operator running: a lag above target makes the operator
start a new worker generation with more lanes and executors (the handoff path, the copying generation left
running), and the decision is on the status and an Event; back within target for the scale-down delay, a generation
with fewer lanes follows, and nothing flaps. The lanes' commits are written to the progress topic as a lane writes
them and the drivers' reports on the Lease as a driver writes them, so the lag and rate are the operator's own
readings from Kafka and the handoffs its own."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pytest

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.resource.names import LEASE_HOLDER, lease_ready_key, lease_took_over_key

from .conftest import KMM2, condition, kmm2_status, wait_for
from .test_operator import names

pytestmark = [pytest.mark.minutes(1.8), pytest.mark.k8s, pytest.mark.kafka]


@dataclass
class Scaled:
    """A resource the operator scaled up from 1 to 4 lanes: generation 2 created, generation 1 still copying."""

    name: str
    topic: str
    progress: str
    up: dict


def _entry(kapi, namespace: str, name: str) -> dict:
    return next(iter(kmm2_status(kapi, namespace, name).get("autoscaling") or []), {})


def _version(kapi, namespace: str, name: str) -> str:
    return kapi.get(KMM2, namespace, name)["metadata"]["resourceVersion"]


def _refreshes() -> float:
    """Status refreshes the operator (in this process) has run, of every resource."""
    from sparkmirror_operator import metrics

    return sum(s.value for m in metrics.REGISTRY.collect() if m.name == "sparkmirror_operator_reconciles"
               for s in m.samples if s.name.endswith("_total") and s.labels.get("trigger") == "refresh")


def _commit(kafka_b, progress: str, topic: str, ranges: list[tuple[int, int, int]], commit_ms: int,
            generation: int) -> None:
    """What a lane writes to the progress topic as it commits: per (partition, first, last) a committed range."""
    from confluent_kafka import Producer

    from sparkmirror.progress import ProgressRecord

    pp = Producer({"bootstrap.servers": kafka_b.bootstrap})
    for partition, first, last in ranges:
        rec = ProgressRecord("a", topic, partition, next_offset=last + 1, source_first=first, source_last=last,
                             target_topic=f"a.{topic}", target_first=first, target_last=last, count=last - first + 1,
                             commit_ms=commit_ms, generation=generation, flow_group="a", mirror="a", lane=0)
        pp.produce(progress, key=rec.key(), value=rec.value())
    pp.flush(10)


def _report(kapi, namespace: str, lease: str, annotations: dict[str, str]) -> None:
    """What a driver does (handoff/lease.py): a merge patch of its own annotations on the Lease."""
    kapi._call("PATCH", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}", [],
               {"metadata": {"annotations": annotations}}, "application/merge-patch+json")


def _hand_over(kapi, namespace: str, name: str, generation: int) -> None:
    """Generation `generation` warms up and takes over as its driver would report it; the handoff completes."""
    lease = f"{name}-a"
    _report(kapi, namespace, lease, {lease_ready_key(generation): str(int(time.time() * 1000))})
    wait_for(f"the Lease moved to generation {generation}", lambda: kapi.get("Lease", namespace, lease)["metadata"]
             ["annotations"].get(LEASE_HOLDER) == str(generation), timeout=60)
    _report(kapi, namespace, lease, {lease_took_over_key(generation): json.dumps(
        {"atMs": int(time.time() * 1000), "tookMs": 100, "fenced": 1})})
    wait_for(f"generation {generation}'s handoff done", lambda: condition(
        kmm2_status(kapi, namespace, name), "Upgrading").get("status") == "False"
        and len(names(kapi, "SparkApplication", namespace, name)) == 1, timeout=60)


def _scale_up(kapi, namespace: str, kafka_a, kafka_b, topic, scale_down_delay: int, rate_for_s: int,
              quiet: bool = True) -> Scaled:
    """A burst of 20,000 records on the source before the resource: at one lane with nothing committed yet the
    operator cannot tell that more lanes would help, and holds (with `quiet`, proven: its status not written
    again while nothing changes); then one lane commits 600 of them (20/s over the operator's 30 s rate window,
    for the next `rate_for_s` seconds): the operator scales to 4 lanes. (The burst comes first so no refresh
    reads the end offsets half-way through it.)"""
    from confluent_kafka import Producer

    from sparkmirror.progress import PROGRESS_TOPIC_CONFIG

    t = topic(kafka_a, partitions=4)
    progress = f"progress-{namespace}"[:200]
    topic(kafka_b, partitions=1, config=PROGRESS_TOPIC_CONFIG, name=progress)
    spec = {"target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap}, "progressTopic": progress,
            "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap}, "topicsPattern": t}],
            "spark": {"parallelism": 1, "executor": {"instances": 1, "cores": 1}},
            "upgrade": {"readyTimeoutSeconds": 600},
            "autoscaling": {"minLanes": 1, "maxLanes": 4, "minExecutors": 1, "maxExecutors": 4,
                            "targetLagSeconds": 60, "cooldownSeconds": 0,
                            "scaleDownDelaySeconds": scale_down_delay}}
    p = Producer({"bootstrap.servers": kafka_a.bootstrap, "linger.ms": 20})
    for i in range(20_000):
        p.produce(t, value=b"x" * 10, partition=i % 4)
    assert p.flush(120) == 0
    kapi.create({"apiVersion": "sparkmirror.io/v1alpha1", "kind": KMM2,
                 "metadata": {"name": "scale", "namespace": namespace}, "spec": spec})

    held = wait_for("a first decision", lambda: (e := _entry(kapi, namespace, "scale")) and "figures" in e and e)
    assert (held["lanes"], held["executors"], held["decision"]) == (1, 1, "hold"), held
    assert held["reason"] == "behind, but the lanes' measured capacity cannot tell that more would help", held
    assert held["figures"]["lag"] == 20_000 and held["figures"]["ratePerSecond"] == 0, held
    assert names(kapi, "SparkApplication", namespace, "scale") == ["scale-a"]

    # nothing changes: refresh after refresh decides the same, and neither the status nor an object is written
    settled = wait_for("the status settled", lambda: (v := _version(kapi, namespace, "scale"), time.sleep(3))[0]
                       == _version(kapi, namespace, "scale") and v, timeout=60)
    if quiet:
        objects = {(kind, o["metadata"]["name"]): o["metadata"]["resourceVersion"]
                   for kind in ("ConfigMap", "SparkApplication", "Lease") for o in kapi.list(kind, namespace)}
        before = _refreshes()
        time.sleep(8)  # four refresh intervals (SPARKMIRROR_STATUS_INTERVAL=2)
        assert _refreshes() - before >= 3
        assert _version(kapi, namespace, "scale") == settled
        assert {(kind, o["metadata"]["name"]): o["metadata"]["resourceVersion"]
                for kind in ("ConfigMap", "SparkApplication", "Lease") for o in kapi.list(kind, namespace)} == objects
        assert _entry(kapi, namespace, "scale")["time"] == held["time"]  # the decision stands since then

    # one lane committed 600 of the burst's records in the last 30 s (20/s)
    _commit(kafka_b, progress, t, [(0, 0, 599)], int(time.time() * 1000) + rate_for_s * 1000 - 30_000,
            generation=1)
    up = wait_for("scaled up", lambda: (e := _entry(kapi, namespace, "scale")).get("decision") == "up" and e,
                  timeout=90)
    assert _version(kapi, namespace, "scale") != settled  # the change is written at once
    return Scaled("scale", t, progress, up)


def test_lag_above_target_starts_a_generation_with_more_lanes(operator, kapi, namespace, kafka_a, kafka_b,
                                                               topic) -> None:
    up = _scale_up(kapi, namespace, kafka_a, kafka_b, topic, scale_down_delay=600, rate_for_s=90).up

    def entry() -> dict:
        return _entry(kapi, namespace, "scale")

    assert (up["lanes"], up["executors"]) == (4, 4), up  # (20/s + 19,400 over 60 s) at 20/s a lane: capped at 4
    figures = up["figures"]
    assert figures["lag"] == 19_400 and figures["ratePerSecond"] == 20.0 and figures["perLanePerSecond"] == 20.0
    assert figures["lagSeconds"] == 970.0 and figures["wantLanes"] == 4, figures
    assert "above the 60 s target" in up["reason"] and up["lastChangeTime"] == up["time"]

    # the change goes through a new worker generation; the one copying keeps its application and its Lease
    apps = wait_for("generation 2", lambda: (n := names(kapi, "SparkApplication", namespace, "scale"))
                    == ["scale-a", "scale-a-g2"] and n)
    assert apps == ["scale-a", "scale-a-g2"]
    g2 = kapi.get("SparkApplication", namespace, "scale-a-g2")
    assert g2["spec"]["executor"]["instances"] == 4
    assert kapi.get("SparkApplication", namespace, "scale-a")["spec"]["executor"]["instances"] == 1
    configs = {cm["metadata"]["name"]: FlowGroupConfig.from_yaml(cm["data"]["flowgroup.yaml"])
               for cm in kapi.list("ConfigMap", namespace, "sparkmirror.io/resource=scale")
               if "flowgroup.yaml" in (cm.get("data") or {})}
    lanes = {c.worker.generation: [c.lanes_of(m) for m in c.mirrors] for c in configs.values()}
    assert lanes == {1: [1], 2: [4]}, lanes
    lease = kapi.get("Lease", namespace, "scale-a")
    assert lease["metadata"]["annotations"]["sparkmirror.io/holder-generation"] == "1"  # copying never stopped

    event = wait_for("ScaledUp event", lambda: next((e for e in kapi.list("Event", namespace)
                                                     if e.get("reason") == "ScaledUp"), None))
    assert "1 -> 4 lanes per mirror, 1 -> 4 executors" in event["message"] and "lag 19400" in event["message"]

    # while the handoff is under way, nothing more changes: no third generation
    wait_for("held during the handoff", lambda: "handoff is under way" in entry().get("reason", ""), timeout=30)
    assert names(kapi, "SparkApplication", namespace, "scale") == ["scale-a", "scale-a-g2"]
    assert entry()["lanes"] == 4 and entry()["lastChangeTime"] == up["lastChangeTime"]
    kapi.delete(KMM2, namespace, "scale")  # the operator refreshes it no more for the tests after this one


def test_back_within_target_for_the_delay_scales_down_once(operator, kapi, namespace, kafka_a, kafka_b,
                                                           topic) -> None:
    """Up to 4 lanes, the handoff done, the backlog copied: the lag within target for the 20 s scale-down delay
    makes a generation with fewer lanes (not before the delay), said on the status and as a ScaledDown Event with
    the figures; then it holds: no generation after it, no way back up while the lag stays within target."""
    # the rate above 0 for 30 s (the commit stamped now): the scale-up is decided at a refresh (every 2 s), the rest
    # of the window is only waited out below (it was 45 s); the quiet hold before it is the test above's to prove
    scaled = _scale_up(kapi, namespace, kafka_a, kafka_b, topic, scale_down_delay=20, rate_for_s=30, quiet=False)
    wait_for("generation 2", lambda: "scale-a-g2" in names(kapi, "SparkApplication", namespace, "scale"))
    _hand_over(kapi, namespace, "scale", 2)
    wait_for("the first commit out of the rate window", lambda: _entry(kapi, namespace, "scale")["figures"]
             ["ratePerSecond"] == 0, timeout=90)
    # generation 2's lanes copied the backlog (their commit times fall before the 30 s rate window, so nothing
    # arrives and nothing is copied any more as far as the operator can tell: the fewest lanes carry that)
    _commit(kafka_b, scaled.progress, scaled.topic, [(0, 600, 4999), (1, 0, 4999), (2, 0, 4999), (3, 0, 4999)],
            int(time.time() * 1000) - 40_000, generation=2)
    within = wait_for("within target", lambda: (e := _entry(kapi, namespace, "scale")).get("withinTargetSince")
                      and e, timeout=60)
    assert within["lanes"] == 4 and within["figures"]["lag"] == 0, within
    assert within["decision"] == "hold" and "only after 20 s" in within["reason"], within
    since = within["withinTargetSince"]

    down = wait_for("scaled down", lambda: (e := _entry(kapi, namespace, "scale")).get("decision") == "down" and e,
                    timeout=90)
    assert (down["lanes"], down["executors"]) == (1, 1), down  # nothing arrives: the fewest lanes carry it
    assert down["figures"]["incomingPerSecond"] == 0 and down["figures"]["perLanePerSecond"] == 20, down
    assert down["withinTargetSince"] == since and down["withinTargetLanes"] == 1, down
    waited = _seconds(down["time"]) - _seconds(since)
    assert waited >= 20, (since, down)  # not before the delay
    assert down["figures"]["lag"] == 0 and down["figures"]["wantLanes"] == 1, down
    assert down["reason"].startswith("within target for 20 s: 1 lanes carry"), down
    event = wait_for("ScaledDown event", lambda: next((e for e in kapi.list("Event", namespace)
                                                       if e.get("reason") == "ScaledDown"), None))
    assert "4 -> 1 lanes per mirror, 4 -> 1 executors" in event["message"] and "lag 0" in event["message"], event

    apps = wait_for("generation 3", lambda: (n := names(kapi, "SparkApplication", namespace, "scale"))
                    == ["scale-a-g2", "scale-a-g3"] and n)
    assert kapi.get("SparkApplication", namespace, "scale-a-g3")["spec"]["executor"]["instances"] == 1
    cm = next(cm for cm in kapi.list("ConfigMap", namespace, "sparkmirror.io/resource=scale")
              if "flowgroup.yaml" in (cm.get("data") or {})
              and FlowGroupConfig.from_yaml(cm["data"]["flowgroup.yaml"]).worker.generation == 3)
    g3 = FlowGroupConfig.from_yaml(cm["data"]["flowgroup.yaml"])
    assert [g3.lanes_of(m) for m in g3.mirrors] == [1], apps

    # hysteresis: generation 3 took over; refresh after refresh it holds at the fewest lanes, nothing more starts
    _hand_over(kapi, namespace, "scale", 3)
    held = wait_for("held at the fewest lanes", lambda: (e := _entry(kapi, namespace, "scale"))["reason"]
                    == "within target at the fewest lanes" and e, timeout=30)
    version, before = _version(kapi, namespace, "scale"), _refreshes()
    time.sleep(8)
    assert _refreshes() - before >= 3
    assert _version(kapi, namespace, "scale") == version  # and the status is not written again
    now = _entry(kapi, namespace, "scale")
    assert (now["lanes"], now["decision"], now["lastChangeTime"]) == (1, "hold", down["lastChangeTime"]), now
    assert now["time"] == held["time"]
    assert names(kapi, "SparkApplication", namespace, "scale") == ["scale-a-g3"]
    assert sorted(e["reason"] for e in kapi.list("Event", namespace)
                  if e.get("reason") in ("ScaledUp", "ScaledDown")) == ["ScaledDown", "ScaledUp"]  # one each
    kapi.delete(KMM2, namespace, "scale")


def _seconds(text: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
