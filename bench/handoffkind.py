"""`python -m bench.handoff --on kind`: the handoff against the restart on a real cluster, through the resource.

The kind ground of the e2e (sparkmirror_dev.kindground: kind, the Kubeflow Spark operator and sparkmirror from
their charts, Kafka east and west as pods), reused when it runs (SPARKMIRROR_KEEP_KIND=1 keeps it afterwards).
One KafkaMirrorMaker2 (east -> west, as the e2e's), a steady numbered load on east, then:
- upgrades: `spec.version` patched, each waited until the status records the handoff (Upgrading False, the new
  version running, one more `handoffs` entry);
- restarts the old way: the driver pod of the generation holding the Lease (the one copying) deleted (SIGTERM,
  it drains; exit 0 while the Lease names it, so the operator submits it again), what a restart was before
  handoffs; the next one once a new driver pod (another UID: the resubmitted one has the same name) runs and the
  records it commits are visible.
Pause per change, upgrades and restarts alike: the largest gap between records becoming visible,
read_committed, on west's copy (every record counted by its sequence number: lost, duplicated).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from sparkmirror.resource.names import LEASE_HOLDER
from sparkmirror_dev import docker, kindground
from sparkmirror_dev.kindground import MIRROR_NS, KindGround
from sparkmirror_dev.testing import NumberedProducer, create_topic, numbered_counts
from sparkmirror_operator.render import LABEL_COMPONENT, LABEL_FLOW_GROUP, LABEL_GENERATION, LABEL_INSTANCE

from .arrivals import Arrivals
from .podtime import PodSampler, extra_pod_seconds, kubectl_pods

PARTITIONS = 4
SPARK = {"imagePullPolicy": "IfNotPresent", "parallelism": 2, "epochSeconds": 20,
         "driver": {"memory": "512m", "coreRequest": "100m"},
         # the product's defaults for slots: `cores` 1, which the operator renders as a task slot per lane (with
         # one slot the new generation's second lane task ran only after its first lane's 20 s standby epoch, and
         # its partitions waited 3-10.7 s for the handoff; issue 35)
         "executor": {"instances": 1, "memory": "512m", "coreRequest": "100m"}}


def _ready(st: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def _holder_driver(g: KindGround, mirror: str) -> dict:
    """The running driver pod of the generation that holds the mirror's Lease (the one copying; a spare or a
    standby generation's driver would restart without pausing anything): its name, UID, generation and group."""
    leases = json.loads(g.kubectl("-n", MIRROR_NS, "get", "leases", "-l",
                                  f"{LABEL_INSTANCE}={mirror},{LABEL_COMPONENT}=lease", "-o", "json"))["items"]
    held = [(lease["metadata"]["labels"][LABEL_FLOW_GROUP], (lease["metadata"].get("annotations") or {})
             .get(LEASE_HOLDER)) for lease in leases]
    held = [(group, int(gen)) for group, gen in held if gen]
    if len(held) != 1:
        raise SystemExit(f"{mirror}: expected one flow group's Lease with a holder, found {held or 'none'}")
    group, gen = held[0]
    pods = json.loads(g.kubectl("-n", MIRROR_NS, "get", "pods", "-l",
                                f"spark-role=driver,{LABEL_INSTANCE}={mirror},{LABEL_FLOW_GROUP}={group},"
                                f"{LABEL_GENERATION}={gen}", "--field-selector=status.phase=Running",
                                "-o", "json"))["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if not live:
        raise SystemExit(f"{mirror}: no running driver pod of generation {gen}, which holds flow group {group}")
    meta = live[0]["metadata"]
    return {"pod": meta["name"], "uid": meta["uid"], "generation": gen, "flowGroup": group}


def _new_holder_driver(g: KindGround, mirror: str, old_uid: str, timeout: float) -> dict:
    """The Lease holder's running driver once it is another pod than `old_uid` (a resubmitted application's
    driver has the same name: only the UID tells the new pod from the deleted one still terminating)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            d = _holder_driver(g, mirror)
            if d["uid"] != old_uid:
                return d
        except SystemExit:
            pass
        time.sleep(1)
    raise SystemExit(f"{mirror}: no new driver pod of the Lease holder within {timeout:.0f} s")


def _flowing(arrivals: Arrivals, since_ms: int, timeout: float) -> None:
    """Records visible again after `since_ms` (plus a few seconds of steady flow)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(1 for t in arrivals.times[-5000:] if t > since_ms + 1000) > 200:
            return
        time.sleep(1)
    raise SystemExit(f"records did not flow again within {timeout:.0f} s")


def run(args: argparse.Namespace) -> dict:
    engine = docker.ensure_engine()
    name = os.environ.get("SPARKMIRROR_KIND_CLUSTER", kindground.DEFAULT_NAME)
    kubeconfig = Path(tempfile.mkdtemp(prefix="bench-kind-")) / "kubeconfig"
    g = kindground.up(kubeconfig, name, fresh=not kindground.keep())
    try:
        return _measure(g, args)
    except kindground.StatusTimeout as e:  # a bench run ends with what the status showed, not a traceback
        raise SystemExit(str(e)) from None
    finally:
        g.stop_forwards()
        if not kindground.keep():
            kindground.down(name)
        engine.stop()


def _measure(g: KindGround, args: argparse.Namespace) -> dict:
    suffix = uuid.uuid4().hex[:6]
    topic, mirror = f"handoff-{suffix}", f"handoff-{suffix}"
    create_topic(g.east.external_bootstrap, topic, PARTITIONS)
    target = {"alias": "west", "bootstrapServers": g.west.internal_bootstrap,
              "tls": {"trustedCertificates": [{"secretName": "west-ca", "certificate": "ca.crt"}]},
              "authentication": {"type": "scram-sha-512", "username": kindground.SCRAM_USER,
                                 "passwordSecret": {"secretName": "west-mirror-user", "password": "password"}}}
    source = {"alias": "east", "bootstrapServers": g.east.internal_bootstrap}
    producer = NumberedProducer(g.east.external_bootstrap, topic, rate=args.rate, partitions=PARTITIONS)
    arrivals = Arrivals(g.west.external_bootstrap, f"east.{topic}")
    pods = PodSampler(kubectl_pods(g.kubectl, MIRROR_NS, f"{LABEL_INSTANCE}={mirror}"))
    producer.start()
    arrivals.start()
    pods.start()
    t0 = time.monotonic()
    g.apply([{"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
              "metadata": {"name": mirror, "namespace": MIRROR_NS},
              "spec": {"version": "4.1.2", "target": target, "mirrors": [{"source": source, "topicsPattern": topic}],
                       "spark": {**SPARK, "image": g.spark_image}}}])
    g.wait_status(mirror, _ready, 1200, "Ready", poll=1.0)
    _flowing(arrivals, int(time.time() * 1000), 600)
    print(f"kind: {mirror} Ready and copying {time.monotonic() - t0:.0f} s after apply", flush=True)
    upgrades: list[int] = []
    records: list[dict] = []
    for i in range(args.upgrades):
        time.sleep(args.every)
        version = f"4.2.{i}"
        before = len(g.status(mirror).get("handoffs") or [])
        upgrades.append(int(time.time() * 1000))
        g.kubectl("-n", MIRROR_NS, "patch", "kafkamirrormaker2", mirror, "--type=merge",
                  "-p", json.dumps({"spec": {"version": version}}))

        def handed_over(st: dict, v: str = version, n: int = before) -> bool:
            up = next((c for c in st.get("conditions") or [] if c["type"] == "Upgrading"), {})
            return len(st.get("handoffs") or []) > n and up.get("status") == "False" and st.get("version") == v

        st = g.wait_status(mirror, handed_over, 900, f"handed over to {version}", poll=1.0)
        records.append({"version": version, "handoff": st["handoffs"][-1]})
        print(f"  upgrade {i + 1} -> {version}: recorded {(time.time() * 1000 - upgrades[-1]) / 1000:.0f} s after "
              f"the patch; {st['handoffs'][-1]}", flush=True)
    restarts: list[int] = []
    restarted: list[dict] = []
    for i in range(args.restarts):
        time.sleep(args.every)
        old = _holder_driver(g, mirror)
        restarts.append(int(time.time() * 1000))
        g.kubectl("-n", MIRROR_NS, "delete", "pod", old["pod"], "--wait=false")
        new = _new_holder_driver(g, mirror, old["uid"], 900)
        running_ms = int(time.time() * 1000)
        _flowing(arrivals, running_ms, 900)  # records committed by the new pod, not the old one's drain
        restarted.append({"deleted": old, "new": new, "newPodRunningMs": running_ms - restarts[-1],
                          "flowingMs": int(time.time() * 1000) - restarts[-1]})
        print(f"  restart {i + 1}: driver {old['pod']} (uid {old['uid']}) of generation {old['generation']}, the "
              f"Lease holder, deleted; new pod {new['uid']} (generation {new['generation']}) running after "
              f"{(running_ms - restarts[-1]) / 1000:.0f} s, records flow again "
              f"{(time.time() * 1000 - restarts[-1]) / 1000:.0f} s later", flush=True)
    time.sleep(args.every)
    sent = producer.stop()
    deadline = time.monotonic() + 300
    while len(arrivals.times) < sent * PARTITIONS and time.monotonic() < deadline:
        time.sleep(1)
    time.sleep(5)  # a duplicate would land after the count was reached
    arrivals.stop()
    pods.stop()
    lost, dup = numbered_counts(g.west.external_bootstrap, f"east.{topic}", PARTITIONS, sent)
    end = int(time.time() * 1000)
    changes = upgrades + restarts
    pauses = arrivals.pauses_between(changes, end)
    up_p, re_p = pauses[:len(upgrades)], pauses[len(upgrades):]
    # each change's extra pod-seconds, up to the next change (the last restart: to the end of the run)
    cost = [extra_pod_seconds(pods.samples, a, b) for a, b in zip(changes, [*changes[1:], end])]
    g.kubectl("-n", MIRROR_NS, "delete", "kafkamirrormaker2", mirror, "--wait=false", check=False)
    return {"upgrades": len(upgrades), "restarts": len(restarts), "records": sent * PARTITIONS,
            "pauses_ms": up_p, "restart_pauses_ms": re_p,
            "pause_ms_max": max(up_p, default=None), "pause_ms_median": statistics.median(up_p) if up_p else None,
            "restart_pause_ms_median": statistics.median(re_p) if re_p else None,
            "lost": lost, "duplicated": dup,
            "handoff_extra_pod_s": cost[:len(upgrades)], "restart_extra_pod_s": cost[len(upgrades):],
            "pod_samples": len(pods.samples), "pod_sample_errors": pods.errors,
            "handoffs": records, "restarted": restarted, "ground": g.timings,
            "changes_ms": {"upgrades": upgrades, "restarts": restarts},
            # where the visible stream stood still (over 500 ms), to lay beside the handoffs' own timestamps
            "gaps_ms": [[a, b] for a, b in zip(arrivals.times, arrivals.times[1:]) if b - a > 500]}
