"""`sparkmirror plan -f FILE [-f FILE ...]`: a dry run against the real clusters, writing nothing.

Per flow group and mirror: the source topics `run` would copy with their partitions, the remote topic each
goes to and what `run` would do to it (create / add partitions N->M / update configs k=v / up to date), the
topics it creates beside the data, the loops the replication policy prevents, and every conflict: two topics
or mirrors writing one target topic, a topic that would be mirrored back to its origin, a progress topic
`run` refuses; and the ACLs `run` would create and delete on the target (`sync.topic.acls.enabled`), with the
source ACLs it does not copy and why. The plan is computed by the same `TopicSync.plan()` and
`TopicSync.acl_state()` that `run` applies when a mirror starts.

Exit status: 0 no conflict; 3 conflicts found; 1 a cluster is unreachable; 2 a file does not validate.
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from ..output import add_output_flag, dump


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="dry run: what `run` would mirror and change on the clusters",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-f", "--file", action="append", required=True, metavar="FILE",
                   help="KafkaMirrorMaker2 resource file (YAML, several documents allowed); repeat for more")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for each cluster request")
    add_output_flag(p, "the plan")
    p.set_defaults(func=plan_command)
    return p


def _err(msg: str) -> None:
    print(f"sparkmirror plan: {msg}", file=sys.stderr, flush=True)


def plan_command(args: argparse.Namespace) -> int:
    from ..inputs import USAGE_EXIT
    from ..preview import CONFLICT_EXIT, observe, preview
    from ..topicsync import TopicSyncError
    from .local import Unreachable, preflight
    from .resources import load_reporting, secrets_reported

    loaded = load_reporting(args.file, _err)
    if loaded is None or secrets_reported(loaded, _err):
        return USAGE_EXIT
    try:
        preflight(loaded.configs, loaded.fields, timeout=args.timeout)
        result = preview(observe(loaded.configs, timeout=args.timeout), loaded.warnings)
    except (Unreachable, TopicSyncError) as e:
        _err(str(e))
        return 1
    if args.output:
        sys.stdout.write(dump(result.as_dict(), args.output))
    else:
        for w in result.warnings:
            _err(f"warning: {w}")
        sys.stdout.write("\n".join(lines(result.as_dict())) + "\n")
    return CONFLICT_EXIT if result.conflicts else 0


def _table(rows: list[list[str]], indent: str) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] for r in rows]


def _acl_lines(acls: dict[str, Any]) -> list[str]:
    if acls["status"] != "ok":
        return [f"    ACLs: not synced: {acls['message'].removeprefix('not synced: ')}"]
    if not acls["create"] and not acls["delete"]:
        head = "    ACLs: up to date"
    else:
        head = f"    ACLs: {len(acls['create'])} to create, {len(acls['delete'])} to delete on the target"
    out = [head + (f" ({len(acls['skipped'])} source ACL(s) not copied)" if acls["skipped"] else "")]
    out += [f"      create {b['text']}" for b in acls["create"]]
    out += [f"      delete {b['text']}" for b in acls["delete"]]
    out += [f"      not copied: {b['text']}: {b['reason']}" for b in acls["skipped"]]
    return out


def _deletion_lines(d: dict[str, Any] | None) -> list[str]:
    if not d or not d["enabled"]:
        return []
    if not d["delete"]:
        return [f"    remote topics to delete: none (deleteRemoteTopics after {d['graceSeconds']} s)"]
    out = [f"    remote topics to delete (their source topic gone for {d['graceSeconds']} s):"]
    for r in d["delete"]:
        when = "now" if r["inSeconds"] <= 0 else f"in {r['inSeconds']:.0f} s"
        out.append(f"      delete {r['topic']} {when}: {r['reason']}")
    out += [f"    not copied until its old remote topic is deleted: {t}" for t in d["held"]]
    return out


def lines(plan: dict[str, Any]) -> list[str]:
    """The plan as a readable text: one table of topics per mirror, then the conflicts."""
    out = []
    for g in plan["flowGroups"]:
        out.append(f"flow group {g['name']} (resource {g['resource']})")
        for m in g["mirrors"]:
            out.append(f"  mirror {m['name']}: {m['source']} -> {m['target']}  policy {m['replicationPolicy']}, "
                       f"{m['lanes']} lanes copying {m.get('copy', 'records')}, configs "
                       f"{'kept in sync' if m['syncTopicConfigs'] else 'set at creation'}")
            if m.get("copyFallback"):
                out.append(f"    copies records, not batches: {m['copyFallback']}")
            rows = [["SOURCE TOPIC", "PARTITIONS", "->", "TARGET TOPIC", "ACTION"]]
            rows += [[t["source"], str(t["partitions"]), "->", t["target"], t["action"]] for t in m["topics"]]
            out += _table(rows, "    ") if m["topics"] else ["    no source topic matches"]
            for t in m["internalTopics"]:
                out.append(f"    {t['role']} topic {t['topic']} on {m['target']}: {t['action']}")
            for t in m["notMirrored"]:
                out.append(f"    not mirrored: {t['topic']}: {t['reason']}")
            out += _acl_lines(m["acls"])
            out += _deletion_lines(m.get("deleteRemoteTopics"))
    if plan["conflicts"]:
        out.append(f"{len(plan['conflicts'])} conflict(s):")
        out += [f"  - {c['message']}" for c in plan["conflicts"]]
    else:
        out.append("no conflicts")
    return out
