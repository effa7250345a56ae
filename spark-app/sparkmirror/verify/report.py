"""The verify report: rows as data (for -o json|yaml), as a table, and the exit status. Pure."""
from __future__ import annotations

EQUAL_EXIT = 0
ERROR_EXIT = 1       # a range could not be read (a cluster did not answer, a topic is gone)
DIFFERS_EXIT = 3     # at least one range differs; 2 stays bad input, as for every sparkmirror command


def summary(rows: list[dict]) -> dict:
    by = {s: sum(1 for r in rows if r["status"] == s) for s in ("equal", "differs", "unavailable", "error")}
    return {"ranges": len(rows), **by, "records": sum(r["sourceCount"] or 0 for r in rows)}


def document(rows: list[dict]) -> dict:
    """What -o json|yaml prints: the summary, then every range."""
    return {"summary": summary(rows), "ranges": [_public(r) for r in rows]}


def _public(r: dict) -> dict:
    return {"flowGroup": r["flow_group"], "mirror": r["mirror"],
            "source": {"cluster": r["source_cluster"], "topic": r["source_topic"], "partition": r["partition"],
                       "offsets": [r["source_from"], r["source_to"]], "count": r["sourceCount"],
                       "hash": r["sourceHash"]},
            "target": {"cluster": r["target_cluster"], "topic": r["target_topic"], "partition": r["partition"],
                       "offsets": [r["target_from"], r["target_to"]], "count": r["targetCount"],
                       "hash": r["targetHash"]},
            "committed": r["committed"], "status": r["status"], "firstDifference": r["firstDifference"],
            "error": r["error"]}


def exit_status(rows: list[dict]) -> int:
    s = summary(rows)
    if s["differs"]:
        return DIFFERS_EXIT
    return ERROR_EXIT if s["error"] else EQUAL_EXIT


def _offsets(a: int, b: int) -> str:
    return "-" if b < a or b < 0 else f"{a}..{b}"


def _detail(r: dict) -> str:
    d = r["firstDifference"]
    if d is not None:
        where = " / ".join(f"{side} offset {d[k]}" for side, k in (("source", "sourceOffset"),
                                                                     ("target", "targetOffset"))
                           if d[k] is not None)
        return f"first difference at {where}: {', '.join(d['fields'])}"
    return r["error"] or ""


def table(rows: list[dict], all_rows: bool = False) -> str:
    """The ranges that are not equal (all of them with `all_rows`), then one summary line."""
    shown = rows if all_rows else [r for r in rows if r["status"] != "equal"]
    head = ("STATUS", "SOURCE", "OFFSETS", "TARGET", "OFFSETS", "RECORDS", "DETAIL")
    lines = [(r["status"], f"{r['source_cluster']}/{r['source_topic']}[{r['partition']}]",
              _offsets(r["source_from"], r["source_to"]),
              f"{r['target_cluster']}/{r['target_topic']}[{r['partition']}]",
              _offsets(r["target_from"], r["target_to"]),
              f"{_count(r['sourceCount'])}/{_count(r['targetCount'])}", _detail(r)) for r in shown]
    out = []
    if lines:
        widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head) - 1)]
        for line in [head, *lines]:
            out.append("  ".join(str(v).ljust(w) for v, w in zip(line, widths)) + "  " + line[-1])
    s = summary(rows)
    out.append(f"{s['ranges']} ranges, {s['records']} source records: {s['equal']} equal, {s['differs']} differ"
               + (f", {s['unavailable']} no longer held (retention)" if s["unavailable"] else "")
               + (f", {s['error']} could not be read" if s["error"] else ""))
    return "\n".join(x.rstrip() for x in out) + "\n"


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)
