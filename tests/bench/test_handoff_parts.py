"""bench.handoff's pure parts: the pause per change from a visibility timeline, handoff.json keeping each path,
and a throughput run's latest.json keeping the sections other benches wrote."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from bench import handoffresults, report
from bench.arrivals import partition_pause_ms, pause_ms, pauses_between

REPO = Path(__file__).resolve().parents[2]


def test_pause_is_the_largest_gap_from_the_last_arrival_before_the_change() -> None:
    times = [0, 100, 200, 300, 1800, 1900, 2000, 5000, 5100]
    # the change at 250: the gap 300 -> 1800 is the pause; the one at 1950: 2000 -> 5000
    assert pauses_between({0: times}, [250, 1950], 6000) == [1500, 3000]
    # counted from the last record before the change: 200 -> 300 is not a pause, 300 -> 1800 is
    assert pause_ms(times, 310, 1900) == 1500


def test_nothing_visible_after_a_change_is_a_pause_until_the_end() -> None:
    assert pause_ms([], 1000, 4000) == 3000
    assert pause_ms([500, 600], 1000, 4000) == 3000  # the copy never resumed
    assert pause_ms([1500, 1600], 1000, 4000) == 500  # no record before the change: counted from the change


def test_handoff_json_keeps_the_other_path(tmp_path: Path) -> None:
    handoffresults.write(tmp_path, "local", {"upgrades": 5, "pause_ms_max": 40, "lost": 0, "duplicated": 0}, REPO)
    handoffresults.write(tmp_path, "kind", {"upgrades": 3, "pause_ms_max": 1900, "lost": 0, "duplicated": 0}, REPO)
    doc = json.loads((tmp_path / "handoff.json").read_text())
    assert doc["local"]["pause_ms_max"] == 40 and doc["kind"]["pause_ms_max"] == 1900
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert doc["kind"]["commit"]["sha"] == head.strip()
    assert isinstance(doc["kind"]["commit"]["dirty"], bool)
    handoffresults.write(tmp_path, "kind", {"upgrades": 5, "pause_ms_max": 1200, "lost": 0, "duplicated": 0}, REPO)
    doc = json.loads((tmp_path / "handoff.json").read_text())
    assert (doc["kind"]["upgrades"], doc["local"]["upgrades"]) == (5, 5)


def test_a_throughput_run_keeps_the_handoff_and_soak_sections() -> None:
    previous = {"handoff": {"pause_ms_max": 40}, "soak": {"minutes": 30}, "runs": ["old"]}
    merged = report.with_kept_sections({"runs": ["new"]}, previous)
    assert merged == {"handoff": {"pause_ms_max": 40}, "soak": {"minutes": 30}, "runs": ["new"]}


def test_a_pause_is_the_longest_of_any_partition_not_of_the_topic() -> None:
    """Lanes hand their partitions over one by one: while partition 0 waits 2.9 s, partition 1 still flows, so
    the topic-wide gap (500 ms) hides what a reader of partition 0 sees."""
    by_partition = {0: [0, 100, 3000, 3100], 1: [0, 500, 1000, 1500, 2000, 2500, 3000]}
    merged = sorted(t for ts in by_partition.values() for t in ts)
    assert pause_ms(merged, 50, 3100) == 500
    assert partition_pause_ms(by_partition, 50, 3100) == 2900
    assert partition_pause_ms({}, 50, 3100) == 3050
