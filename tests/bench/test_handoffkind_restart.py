"""bench.handoff --on kind's restart step on the real API server: it restarts the generation holding the Lease (not
a spare's driver that happens to be listed first), and a restart is over only when a pod with another UID runs
(the resubmitted driver has the same name as the deleted one). Pods are set Running through their status, as no
kubelet runs here."""
from __future__ import annotations

import json

import pytest

from bench.handoffkind import _holder_driver, _new_holder_driver
from sparkmirror.resource.names import LEASE_HOLDER
from sparkmirror_dev.kindground import MIRROR_NS
from sparkmirror_operator.render import LABEL_COMPONENT, LABEL_FLOW_GROUP, LABEL_GENERATION, LABEL_INSTANCE

pytestmark = pytest.mark.k8s


class _Ground:
    """KindGround's kubectl (stdout, AssertionError on failure), on the test API server."""

    def __init__(self, kube) -> None:
        self.kube = kube

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 300) -> str:
        res = self.kube.kubectl(*args, input=input, check=False)
        if check and res.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {res.stderr}")
        return res.stdout


def _driver_pod(g: _Ground, name: str, mirror: str, generation: int) -> str:
    """A Running driver pod of `mirror`'s generation; its UID."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": MIRROR_NS,
                        "labels": {"spark-role": "driver", LABEL_INSTANCE: mirror, LABEL_FLOW_GROUP: "east",
                                   LABEL_GENERATION: str(generation)}},
           "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark"}]}}
    g.kubectl("create", "-f", "-", input=json.dumps(pod))
    g.kubectl("-n", MIRROR_NS, "patch", "pod", name, "--subresource=status", "--type=merge",
              "-p", json.dumps({"status": {"phase": "Running"}}))
    return json.loads(g.kubectl("-n", MIRROR_NS, "get", "pod", name, "-o", "json"))["metadata"]["uid"]


def test_the_restart_step_takes_the_lease_holders_driver_and_waits_for_a_new_uid(kube) -> None:
    g = _Ground(kube)
    mirror = "hk"
    g.kubectl("create", "namespace", MIRROR_NS, check=False)  # (already there when the module runs again)
    g.kubectl("-n", MIRROR_NS, "create", "serviceaccount", "default", check=False)  # no controller makes it here
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": f"{mirror}-east", "namespace": MIRROR_NS,
                          "labels": {LABEL_INSTANCE: mirror, LABEL_COMPONENT: "lease", LABEL_FLOW_GROUP: "east"},
                          "annotations": {LEASE_HOLDER: "3"}}, "spec": {}}
    g.kubectl("create", "-f", "-", input=json.dumps(lease))
    _driver_pod(g, f"{mirror}-east-g2-driver", mirror, 2)  # the hot spare that handed over: listed first
    holder_uid = _driver_pod(g, f"{mirror}-east-g3-driver", mirror, 3)
    assert _holder_driver(g, mirror) == {"pod": f"{mirror}-east-g3-driver", "uid": holder_uid, "generation": 3,
                                         "flowGroup": "east"}
    with pytest.raises(SystemExit, match="no new driver pod"):  # the same pod again is no restart
        _new_holder_driver(g, mirror, holder_uid, timeout=3)
    g.kubectl("-n", MIRROR_NS, "delete", "pod", f"{mirror}-east-g3-driver", "--grace-period=0", "--force")
    new_uid = _driver_pod(g, f"{mirror}-east-g3-driver", mirror, 3)  # resubmitted: the same name
    assert new_uid != holder_uid
    assert _new_holder_driver(g, mirror, holder_uid, timeout=30)["uid"] == new_uid
