"""What a failover did per consumer group and partition: decided here (pure), shown as a table or a document.

Actions per partition:
- committed: the group's translated offset was committed on the target;
- kept: the group on the target already stood at or past it (never moved backwards);
- active: the group has members on the target, so its offsets cannot be set (stop those consumers, run again);
- failed: the commit on the target failed (e.g. a consumer joined meanwhile);
- untranslated: no exact target position is known (nothing of the partition mirrored yet, or the offset is
  older than the progress history); the group has no offset there and would start at `auto.offset.reset`.
Consumers can move when every partition is `committed` or `kept`: exit 0; else 1.

Share groups (`shareGroups`, KIP-932) have rows of their own (`sharegroups/sync.ShareMove`: set, kept, active,
missing, failed, untranslated, unsupported); every one `set`, `kept` or `unsupported` (a target without share
groups: said in `shareGroupsNote`) for the report to be ok. Each group's configs (`configs`,
`sharegroups/moves.ConfigCarry`: carried, changed, left out where the target does not know one) must have been
carried too: one refused, or not read or set, and the group has not moved (its consumers would get something
else on the target).
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..mm2formats import Checkpoint
from ..positionmove import PartitionMove
from ..sharegroups.moves import SETTLED, ConfigCarry

MOVED = ("committed", "kept")


@dataclass(frozen=True)
class Untranslated:
    group: str
    source_topic: str
    partition: int
    source_offset: int
    why: str




def decide(group: str, checkpoints: Iterable[Checkpoint], on_target: Mapping[tuple[str, int], int], members: int,
           upstream: Mapping[str, str], untranslated: Iterable[Untranslated] = ()) -> list[PartitionMove]:
    """One group's rows: `on_target` its committed offsets on the target, `members` its active members there,
    `upstream` remote topic -> source topic."""
    rows = []
    for cp in sorted(checkpoints, key=lambda c: (c.topic, c.partition)):
        src = upstream.get(cp.topic, cp.topic)
        have = on_target.get((cp.topic, cp.partition))
        if members:
            action, detail = "active", f"{members} consumer(s) active on the target: stop them and run again"
        elif have is not None and have >= cp.downstream_offset:
            action, detail = "kept", f"the group already stands at {have} on the target (never moved back)"
        else:
            action, detail = "committed", "" if have is None else f"was {have}"
        rows.append(PartitionMove(group, src, cp.topic, cp.partition, cp.upstream_offset, cp.downstream_offset,
                                  action, detail))
    for u in sorted(untranslated, key=lambda u: (u.source_topic, u.partition)):
        rows.append(PartitionMove(group, u.source_topic, "", u.partition, u.source_offset, None, "untranslated",
                                  u.why))
    return rows


def to_commit(rows: Iterable[PartitionMove]) -> dict[str, dict[tuple[str, int], int]]:
    """group -> (target topic, partition) -> offset, for the rows whose action is `committed`."""
    out: dict[str, dict[tuple[str, int], int]] = {}
    for r in rows:
        if r.action == "committed" and r.target_offset is not None:
            out.setdefault(r.group, {})[(r.target_topic, r.partition)] = r.target_offset
    return out


def can_move(rows: Iterable[PartitionMove]) -> bool:
    return all(r.action in MOVED for r in rows)


def table(doc: dict) -> str:
    """The report for people."""
    out = []
    src = "source" if doc["offsetsFrom"] == "source" else "last checkpoints on the target (source unreachable)"
    if doc.get("undo"):
        for s in doc["stopped"]:
            out.append(f"flow group {s['flowGroup']}: " + ("may copy again" if s["undone"] else "was not failed over"))
        return "\n".join(out) + "\n"
    if doc.get("failback"):
        back = doc["failback"]
        out.append(f"failback of mirror {back['forwardMirror']} ({doc['target']} -> {doc['source']}): its reverse "
                   f"mirror {doc['mirror']} stopped, groups moved back to {doc['target']}; "
                   + ("it copies again" if all(u["undone"] for u in back["undone"]) else "it was not failed over"))
    else:
        out.append(f"failover of mirror {doc['mirror']} ({doc['source']} -> {doc['target']})")
    for s in doc["stopped"]:
        how = "already failed over; fenced again" if s["alreadyFailedOver"] else "stopped"
        others = [m for m in s.get("mirrors", []) if m != doc["mirror"]]
        out.append(f"  flow group {s['flowGroup']}: {how} ({len(s['fencedIds'])} transactional ids fenced, "
                   f"{s['tookMs']} ms)"
                   + (f"; its other mirrors stop with it: {', '.join(others)}" if others else ""))
    out.append(f"  group offsets from: {src}")
    if doc.get("notCopied"):
        out.append(f"  {doc['notCopied']} records on the source were not copied before the stop (they stay on "
                   "the source; --wait-caught-up waits for them)")
    for why in doc.get("notMoved", []):
        out.append(f"  NOT MOVED: {why}")
    if doc.get("groupsNotMoved"):
        out.append(f"  groups not moved: {', '.join(doc['groupsNotMoved'])}")
    for g in doc["groups"]:
        if g.get("checkpointAgeMs") is not None:
            out.append(f"  group {g['group']}: last checkpoint {g['checkpointAgeMs'] / 1000:.1f} s old (its consumers "
                       "repeat what they read on the source since)")
    rows = [r for g in doc["groups"] for r in g["partitions"]]
    if not rows:
        out.append("  no consumer group to move")
    else:
        head = ("GROUP", "SOURCE TOPIC", "PARTITION", "SOURCE OFFSET", "TARGET TOPIC", "TARGET OFFSET", "ACTION")
        cells = [head] + [(r["group"], r["sourceTopic"], str(r["partition"]), str(r["sourceOffset"]),
                           r["targetTopic"] or "-", "-" if r["targetOffset"] is None else str(r["targetOffset"]),
                           r["action"] + (f" ({r['detail']})" if r["detail"] else "")) for r in rows]
        widths = [max(len(c[i]) for c in cells) for i in range(len(head) - 1)]
        for c in cells:
            out.append("  " + "  ".join(v.ljust(w) for v, w in zip(c, widths)) + "  " + c[-1])
    for g in doc.get("shareGroups", []):
        for r in g["partitions"]:
            target = "-" if r["targetOffset"] is None else f"{r['targetTopic']}[{r['partition']}]@{r['targetOffset']}"
            out.append(f"  share group {r['group']}: {r['sourceTopic']}[{r['partition']}] start {r['sourceOffset']} -> "
                       f"{target}: {r['action']}" + (f" ({r['detail']})" if r["detail"] else ""))
        if g.get("configs"):
            out.append(f"  share group {g['group']} configs: {config_line(g['configs'])}")
    if doc.get("shareGroupsNote"):
        out.append(f"  share groups: {doc['shareGroupsNote']}")
    out.append((f"consumers can move back to {doc['target']}" if doc.get("failback") else
                "consumers can move to the target") if doc["ok"] else
               "consumers cannot all move yet: see the groups marked active or untranslated, and NOT MOVED")
    return "\n".join(out) + "\n"


def config_line(c: dict) -> str:
    """A share group's configs (`ConfigCarry.as_dict`) in a few words."""
    parts = [f"{n}={v}" + (" (set)" if n in c["changed"] else " (kept)") for n, v in sorted(c["carried"].items())]
    parts += [f"{n} not carried: {why}" for n, why in sorted({**c["leftOut"], **c["refused"]}.items())]
    if c["error"]:
        parts.append(c["error"])
    return ", ".join(parts) or "none set on the source group"


def document(mirror: str, source: str, target: str, offsets_from: str, stopped: list[dict],
             rows: list[PartitionMove], not_copied: int | None = None, not_moved: list[str] = (),
             ages: Mapping[str, int] | None = None, unmoved: Iterable[str] = (), shares: Iterable = (),
             shares_note: str = "", share_configs: Mapping[str, ConfigCarry] | None = None) -> dict:
    """`not_copied`: records the source held that the mirror had not copied when it stopped (None: unknown, the
    source did not answer). `not_moved`: why selected groups could not be moved though they have no row (e.g. no
    checkpoint with the source gone); any makes the report not `ok`, so consumers are not told to move.
    `ages`: group -> how old its last checkpoint was (ms; the source gone): its consumers repeat what they read
    since. `unmoved`: groups without rows that could not be moved, named in `groupsNotMoved` with the others.
    `shares`: the share groups' rows (`ShareMove`); `shares_note`: why share groups were not carried, if so;
    `share_configs`: group -> what carrying its configs did (none: not tried, the target serves no share groups)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(r.group, []).append(r.as_dict())
    entries = [{"group": g, "partitions": p, "moved": all(r["action"] in MOVED for r in p),
                "checkpointAgeMs": (ages or {}).get(g)} for g, p in sorted(groups.items())]
    not_moved_groups = sorted({*(e["group"] for e in entries if not e["moved"]), *unmoved})
    share_groups: dict[str, list[dict]] = {}
    for s in shares:
        share_groups.setdefault(s.group, []).append(s.as_dict())
    carried = share_configs or {}
    share_entries = [{"group": g, "partitions": p,
                      "configs": carried[g].as_dict() if g in carried else None,
                      "moved": all(r["action"] in SETTLED for r in p) and (g not in carried or carried[g].ok)}
                     for g, p in sorted(share_groups.items())]
    shares_not_moved = [e["group"] for e in share_entries if not e["moved"]]
    return {"mirror": mirror, "source": source, "target": target, "offsetsFrom": offsets_from,
            "stopped": stopped, "notCopied": not_copied, "notMoved": list(not_moved), "groups": entries,
            "groupsNotMoved": not_moved_groups, "shareGroups": share_entries, "shareGroupsNotMoved": shares_not_moved,
            "shareGroupsNote": shares_note,
            "ok": can_move(rows) and not not_moved and not not_moved_groups and not shares_not_moved}


_LITERAL = re.compile(r"(?:[A-Za-z0-9_-]|\\[.\-]|\.)+")


def named_groups(pattern: str | None) -> list[str]:
    """The group names a `--groups` pattern spells out one by one (`app-1|app-2`, `app\\.v1`; `.` taken as
    itself): the groups a failover can name as not moved when the source, which lists the others, is gone.
    Branches with other regex syntax select by pattern and name nothing."""
    if not pattern:
        return []
    out = []
    for branch in pattern.split("|"):
        if _LITERAL.fullmatch(branch):
            out.append(re.sub(r"\\(.)", r"\1", branch))
    return out
