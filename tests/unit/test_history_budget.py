"""The offset history's budget (issue 39 item 4): the pure sizing rule and the measured bytes per range."""
from __future__ import annotations

import pytest

from sparkmirror.historybudget import (HISTORY_FIELD, MIB, MIN_RANGES, HistoryTooLarge, fitting_cap, held_ranges,
                                       parse_memory, size_history)
from sparkmirror.progress.footprint import bytes_per_range
from sparkmirror.progress.state import OffsetMap, Range


@pytest.mark.parametrize("text,expected", [("512m", 512 * MIB), ("2g", 2048 * MIB), ("1024", 1024 * MIB),
                                           ("1048576k", 1024 * MIB), ("1G", 1024 * MIB), ("4gb", 4096 * MIB)])
def test_spark_sizes_are_read_as_spark_reads_driver_memory(text: str, expected: int) -> None:
    assert parse_memory(text) == expected


def test_a_size_that_is_not_one_names_the_field() -> None:
    with pytest.raises(HistoryTooLarge, match=r"spec\.spark\.driver\.memory.*'lots'.*not a Spark size"):
        size_history("lots", 8, 60.0, None)


def test_the_derived_cap_is_the_largest_that_fits_the_share() -> None:
    b = size_history("1g", 8, 60.0, None)
    assert b.derived and b.budget == 256 * MIB
    assert b.needed <= b.budget  # full history fits its share ...
    assert 8 * held_ranges(b.cap + b.cap // 50) * 60.0 > b.budget  # ... and 2 % more would not
    # the same memory over ten times the partitions: a tenth of the cap (within the rounding of the search)
    tenfold = size_history("1g", 80, 60.0, None)
    assert tenfold.cap == pytest.approx(b.cap / 10, rel=0.03)
    assert size_history("1g", 8, 60.0, None, share=0.5).cap == pytest.approx(2 * b.cap, rel=0.03)


def test_a_cap_the_user_set_is_kept_when_it_fits() -> None:
    b = size_history("1g", 8, 60.0, 200_000)
    assert (b.cap, b.derived) == (200_000, False)
    assert "200,000 ranges/partition (set by spec.spark.offsetHistory)" in b.describe()
    assert "25% of driver memory 1,024 MiB = 256.0 MiB for 8 source partitions at 60.0 bytes/range" in b.describe()


def test_a_cap_that_cannot_fit_is_refused_with_the_fields_and_figures() -> None:
    with pytest.raises(HistoryTooLarge) as e:
        size_history("512m", 2000, 60.0, 200_000)
    msg = str(e.value)
    need = 2000 * held_ranges(200_000) * 60.0 / MIB
    assert msg.startswith(f"{HISTORY_FIELD}=200,000 ranges/partition needs {need:,.1f} MiB")
    assert "spec.spark.driver.memory (spark.driver.memory)=512m is 128.0 MiB for 2000 source partitions" in msg
    assert f"at most {fitting_cap(128 * MIB, 2000, 60.0):,} fit, below the minimum {MIN_RANGES:,}: set spec" in msg
    # the memory the message asks for does hold the requested cap
    wanted = msg.rsplit("at least ", 1)[1]
    assert size_history(wanted, 2000, 60.0, 200_000).cap == 200_000
    assert "Traceback" not in msg and "\n" not in msg
    # with fewer partitions a lower cap would do, and the message says which
    with pytest.raises(HistoryTooLarge, match=rf"set {HISTORY_FIELD} to at most 4\d,\d\d\d \(or leave it out"):
        size_history("512m", 40, 60.0, 200_000)


def test_too_many_partitions_for_even_the_minimum_is_refused() -> None:
    with pytest.raises(HistoryTooLarge, match=rf"fewer than the minimum {MIN_RANGES:,} ranges/partition") as e:
        size_history("256m", 50_000, 60.0, None)
    wanted = str(e.value).split("at least ", 1)[1].split(",", 1)[0]
    assert size_history(wanted, 50_000, 60.0, None).cap >= MIN_RANGES


def test_bytes_per_range_is_measured_and_holds_against_a_real_map() -> None:
    """The measured figure is about the seven 8-byte columns plus their slack; a map held at a cap uses no more
    than the rule's `held_ranges` times it (sized by the columns' own allocations: no tracemalloc in a test
    process that may hold Spark's threads)."""
    import sys

    per_range = bytes_per_range()
    assert 56 <= per_range < 100
    cap = 50_000
    m = OffsetMap()
    empty = sum(sys.getsizeof(c) for c in m._cols)
    r = Range(0, 0, 0, 0, 1, 0, 100, "t", "s", 0, "m", "c")
    for i in range(3 * cap):
        m.append(r._replace(source_first=i, commit_ms=10**12 + i))
        m.keep_last(cap)
    held = sum(sys.getsizeof(c) for c in m._cols) - empty
    assert len(m) == cap
    assert held <= held_ranges(cap) * per_range * 1.05


def test_bytes_per_range_is_measured_in_a_child_never_by_tracing_this_process(monkeypatch) -> None:
    """Starting tracemalloc in a driver whose other threads allocate can crash CPython 3.11 (gh-128679): the
    figure comes from a one-thread child (its worth: the test above); a child that cannot run gives the stated
    upper figure, not an exception."""
    import sys
    import tracemalloc

    from sparkmirror.progress import footprint

    footprint.bytes_per_range.cache_clear()
    traced_here = []
    with monkeypatch.context() as m:
        m.setattr(tracemalloc, "start", lambda *a: traced_here.append(a))
        child = footprint.bytes_per_range()
    assert traced_here == [] and not tracemalloc.is_tracing()
    assert 56 <= child < footprint.UNMEASURED_BYTES_PER_RANGE
    footprint.bytes_per_range.cache_clear()
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert footprint.bytes_per_range(5_000) == footprint.UNMEASURED_BYTES_PER_RANGE
    footprint.bytes_per_range.cache_clear()
