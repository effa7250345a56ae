"""`sparkmirror verify`'s pure parts: committed history -> ranges that tile both sides, digests, the report."""
from __future__ import annotations

from sparkmirror.progress import ProgressRecord
from sparkmirror.verify.compare import Side, field_digests, first_difference
from sparkmirror.verify.ranges import plan_ranges
from sparkmirror.verify.report import DIFFERS_EXIT, EQUAL_EXIT, ERROR_EXIT, exit_status, table


def _commit(src: tuple[int, int], tgt: tuple[int, int], count: int) -> ProgressRecord:
    return ProgressRecord("a", "orders", 3, src[1] + 1, src[0], src[1], "a.orders", tgt[0], tgt[1], count, 0, 1,
                          "fg", "a-to-b")


def test_ranges_tile_both_sides_across_markers_and_empty_commits() -> None:
    # target offsets skip one transaction marker after each commit; the third commit wrote nothing (all skipped)
    history = [_commit((0, 9), (0, 9), 10), _commit((10, 19), (11, 20), 10), _commit((20, 24), (-1, -1), 0),
               _commit((25, 34), (22, 31), 10)]
    ranges = plan_ranges("fg", "a-to-b", "b", history, range_records=15)
    assert [(r.source_from, r.source_to, r.target_from, r.target_to, r.committed) for r in ranges] == [
        (0, 19, 0, 20, 20),   # two commits: a commit is never split
        (20, 34, 21, 31, 10),  # starts right after the previous range on both sides: a stray record at 21 is inside
    ]
    assert ranges[0].target_topic == "a.orders" and ranges[0].target_cluster == "b" and ranges[0].partition == 3


def test_a_range_that_wrote_nothing_has_no_target_offsets() -> None:
    [r] = plan_ranges("fg", "m", "b", [_commit((0, 4), (-1, -1), 0)], 10)
    assert (r.target_from, r.target_to, r.committed) == (-1, -1, 0)


def _side(*records: tuple[int, bytes]) -> Side:
    s = Side()
    for offset, value in records:
        s.add(offset, field_digests(b"k", value, [("h", b"1"), ("n", None)], 1000))
    return s


def test_first_difference_names_offsets_and_fields() -> None:
    src = _side((5, b"x"), (6, b"y"))
    assert first_difference(src, _side((10, b"x"), (11, b"y"))) is None
    assert first_difference(src, _side((10, b"x"), (11, b"Y"))) == {"sourceOffset": 6, "targetOffset": 11,
                                                                     "fields": ["value"]}
    assert first_difference(src, _side((10, b"x"))) == {"sourceOffset": 6, "targetOffset": None,
                                                        "fields": ["missing on the target"]}
    # null and empty differ, and header order counts
    assert field_digests(None, b"", None, 1) != field_digests(b"", b"", None, 1)
    assert field_digests(b"k", b"v", [("a", b"1"), ("b", b"2")], 1) != field_digests(b"k", b"v", [("b", b"2"),
                                                                                                  ("a", b"1")], 1)


def _row(status: str, **kw) -> dict:
    return {"flow_group": "fg", "mirror": "a-to-b", "source_cluster": "a", "source_topic": "orders", "partition": 0,
            "source_from": 0, "source_to": 9, "target_cluster": "b", "target_topic": "a.orders", "target_from": 0,
            "target_to": 9, "committed": 10, "sourceCount": 10, "targetCount": 10, "sourceHash": "s",
            "targetHash": "s", "status": status, "firstDifference": None, "error": None, **kw}


def test_table_lists_what_differs_and_exit_status() -> None:
    diff = _row("differs", targetHash="t", firstDifference={"sourceOffset": 4, "targetOffset": 4,
                                                            "fields": ["value"]})
    text = table([_row("equal"), diff])
    assert "a/orders[0]" in text and "b/a.orders[0]" in text and "first difference at source offset 4 / target " \
        "offset 4: value" in text
    assert text.splitlines()[-1] == "2 ranges, 20 source records: 1 equal, 1 differ"
    assert len(text.splitlines()) == 3  # header, the range that differs, the summary: equal ranges only with --all
    assert len(table([_row("equal"), diff], all_rows=True).splitlines()) == 4
    assert exit_status([_row("equal")]) == EQUAL_EXIT
    assert exit_status([_row("equal"), _row("unavailable", error="gone")]) == EQUAL_EXIT
    assert exit_status([_row("error", error="x"), diff]) == DIFFERS_EXIT
    assert exit_status([_row("error", error="x")]) == ERROR_EXIT
