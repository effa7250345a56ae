"""The benchmark's sparkmirror knobs reach the flow group it runs, and their absence keeps the resource's defaults."""
from __future__ import annotations

from pathlib import Path


from bench.cli import parse
from bench.contenders import MirrorSetup, SparkMirror


def test_linger_and_commit_interval_reach_the_flow_group(tmp_path: Path, monkeypatch) -> None:
    assert (parse(["--linger-ms", "0"]).linger_ms, parse([]).linger_ms) == (0, None)
    setup = MirrorSetup("127.0.0.1:1", "127.0.0.1:2", "b1k-.*", 2, tmp_path)
    monkeypatch.setattr(SparkMirror, "linger_ms", 0)
    monkeypatch.setattr(SparkMirror, "commit_interval_ms", 250)
    fg = SparkMirror(exactly_once=True).flowgroup(setup)
    assert (fg.lingerMs, fg.commitIntervalMs) == (0, 250)  # 0 is a value, not "unset"
    monkeypatch.setattr(SparkMirror, "linger_ms", None)
    monkeypatch.setattr(SparkMirror, "commit_interval_ms", None)
    alo = SparkMirror(exactly_once=False).flowgroup(setup)
    eos = SparkMirror(exactly_once=True).flowgroup(setup)
    assert alo.lingerMs == 20 and eos.lingerMs == eos.commitIntervalMs == 100  # the delivery mode's defaults
