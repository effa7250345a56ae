"""The operator's metrics endpoint: reconciles counted and timed by trigger and result, handoffs counted once
each, served over HTTP on loopback."""
from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkmirror_operator import metrics


def _scrape(port: int) -> dict[tuple[str, tuple], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_reconciles_and_handoffs_are_served() -> None:
    port = metrics.serve(0, "127.0.0.1")
    before = _scrape(port)
    assert metrics.timed("lease", lambda: 7) == 7
    with pytest.raises(RuntimeError), metrics.reconciling("lease"):
        raise RuntimeError("API server gone")
    old = {"handoffs": [{"toGeneration": 2, "toFlowGroups": ["g1"]}]}
    new = {"handoffs": [*old["handoffs"], {"toGeneration": 3, "toFlowGroups": ["g1", "g2"]}]}
    assert metrics.count_handoffs("ns", "mm", old, new) == 1
    assert metrics.count_handoffs("ns", "mm", new, new) == 0  # the same status written again counts nothing
    after = _scrape(port)

    def delta(series: str, **labels: str) -> float:
        key = (series, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert delta("sparkmirror_operator_reconciles_total", trigger="lease", result="ok") == 1
    assert delta("sparkmirror_operator_reconciles_total", trigger="lease", result="error") == 1
    assert delta("sparkmirror_operator_reconcile_duration_seconds_count", trigger="lease") == 2
    assert delta("sparkmirror_operator_handoffs_total", resource_namespace="ns", resource="mm", flow_group="g1") == 1
    assert delta("sparkmirror_operator_handoffs_total", resource_namespace="ns", resource="mm", flow_group="g2") == 1


def test_expected_flow_groups_follow_the_status() -> None:
    """The gauge the mirror-gone alert compares the drivers with: a flow group with an application is expected;
    one stopped or failed over (no application in the status), a paused resource and a deleted one are not."""
    port = metrics.serve(0, "127.0.0.1")

    def expected() -> set[str]:
        return {dict(k[1])["flow_group"] for k, v in _scrape(port).items()
                if k[0] == "sparkmirror_operator_flow_group_expected" and dict(k[1])["resource"] == "gone" and v == 1}

    running = {"flowGroups": [{"name": "g1", "application": "gone-g1-1"}, {"name": "g2", "application": "gone-g2-1"}]}
    assert metrics.expect("ns", "gone", running) == {"g1", "g2"} and expected() == {"g1", "g2"}
    one_stopped = {"flowGroups": [{"name": "g1", "application": "gone-g1-1"}, {"name": "g2"}]}
    assert metrics.expect("ns", "gone", one_stopped) == {"g1"} and expected() == {"g1"}
    assert metrics.expect("ns", "gone", running, "paused") == set() and expected() == set()
    assert metrics.expect("ns", "gone", running, "running") == {"g1", "g2"}
    assert metrics.expect("ns", "gone", None) == set() and expected() == set()
    # deleted while a refresh that read it before was under way: the refresh finishing later brings nothing back
    assert metrics.expect("ns", "gone", running, "running", "uid-1") == {"g1", "g2"}
    metrics.forget("ns", "gone", "uid-1")
    assert expected() == set()
    assert metrics.expect("ns", "gone", running, "running", "uid-1") == set() and expected() == set()
    # created again under the same name: another uid, expected again
    assert metrics.expect("ns", "gone", running, "running", "uid-2") == {"g1", "g2"}
    # a late refresh of the deleted one leaves its namesake's groups as they are
    assert metrics.expect("ns", "gone", one_stopped, "running", "uid-1") == set() and expected() == {"g1", "g2"}
    metrics.forget("ns", "gone", "uid-2")
    assert expected() == set()
    metrics.count_handoffs("ns", "gone", {}, {"handoffs": [{"toGeneration": 2, "toFlowGroups": ["g1"]}]})
    names = [frozenset(dict(k[1])) for k in _scrape(port) if k[0].startswith("sparkmirror_operator_")]
    assert frozenset({"resource_namespace", "resource", "flow_group"}) in names
    assert not any("namespace" in n for n in names), "a `namespace` label is renamed by the ServiceMonitor"
