"""The fault campaign's report: a row per kind of fault, and the Markdown page of `bench/results/chaos*.md`."""
from __future__ import annotations

from .chaosmodel import (CLIENT_TIMEOUTS_S, KINDS, OUTAGES, PARTS, ROTATION, TX_TIMEOUT_MS, Campaign,
                         listener_kinds)


def summary(camp: Campaign) -> list[dict]:
    rows = []
    for kind in (*KINDS, *OUTAGES, ROTATION):
        fs = [f for f in camp.faults if f.kind == kind]
        if not fs:
            continue
        rec = [f.recovery_s for f in fs if f.resumed]
        rows.append({"fault": kind, "count": len(fs), "recovered": len(rec),
                     "longest_stall_s": round(max(f.stall_s for f in fs), 1),
                     "recovery_median_s": round(sorted(rec)[len(rec) // 2], 1) if rec else None,
                     "recovery_max_s": round(max(rec), 1) if rec else None})
    return rows


def render(camp: Campaign, rows: list[dict], machine: dict) -> str:
    commit = machine.get("git_commit", "?") + (" with uncommitted spark-app changes"
                                               if machine.get("spark_app_uncommitted") else "")
    lines = ["# sparkmirror fault campaign (`make chaos`)", "",
             f"Source and target: 3 KRaft brokers each (combined broker+controller), replication factor 3, "
             f"min.insync.replicas 2. {_listener(camp.security)}. Mirror: spark-submit to a Spark standalone cluster (1 worker, 2 cores, one "
             f"executor JVM), 2 lanes, exactly-once copying {camp.copy}, transaction.timeout.ms {TX_TIMEOUT_MS}. Load: {camp.rate:.0f} "
             f"sequences/s on each of {PARTS} partitions. Pause between faults ~{camp.pause_s:.0f} s; broker kills "
             f"restart after {camp.pause_s:.0f} s; outages {camp.outage_s:.0f} s (longest client timeout "
             f"{max(CLIENT_TIMEOUTS_S.values()):.0f} s).", "",
             "| fault | count | recovered | longest stall s | recovery median s | recovery max s |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['fault']} | {r['count']} | {r['recovered']} | {r['longest_stall_s']} | "
                     f"{r['recovery_median_s']} | {r['recovery_max_s']} |")
    lines += ["", f"**Records**: {camp.sent * PARTS:,} produced, {camp.records:,} on the target (read_committed); "
              f"**missing {camp.missing}, duplicated {camp.duplicated}, out of order {camp.reordered}**; counted "
              f"again {camp.recount_after_s:.0f} s later: {_recount(camp.recount)}. Catch-up after the load stopped: "
              f"{camp.catch_up_s:.0f} s. Mirror ended unexpectedly: {len(camp.mirror_ended)}. "
              f"Campaign wall time: {camp.wall_s / 60:.1f} min.", "",
              "Stall: longest time without target growth from the fault until copying resumed after the repair. "
              "Recovery: fault -> first target growth after the repair (broker or cluster restarted and answering; Spark "
              "faults: the driver launching a task again).", "",
              f"Machine: {machine.get('cores', '?')} cores, load average at the end {machine.get('loadavg', '?')} "
              f"(shared with other work: figures include contention). Commit: {commit}."]
    for e in camp.mirror_ended:
        lines += ["", f"- mirror ended: {e[:500]}"]
    return "\n".join(lines) + "\n"


def _listener(security: str) -> str:
    """The listeners the mirror used, in the report's words."""
    words = {"none": "PLAINTEXT", "sasl_ssl": "SASL_SSL with SCRAM-SHA-512", "mtls": "SSL with client certificates (mTLS)"}
    kinds = listener_kinds(security)
    on = "" if kinds["source"] == "none" else ", authorizer on"
    if kinds["source"] == kinds["target"]:
        return f"The mirror's listener on both: {words[kinds['source']]}{on}"
    return f"The mirror's listeners: the source's {words[kinds['source']]}, the target's {words[kinds['target']]}{on}"


def _recount(recount: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in recount.items()) if recount else "not done"
