"""Taking a flow group over: what a worker generation does on the target clusters before its lanes copy.

1. Generation mark, phase "supersede": on each target's progress topic, "flow group G belongs to generation N"
   for its own group and every predecessor's group (a split or merge supersedes the old groups).
2. Fencing: `init_transactions` on every transactional id the predecessors' lanes held, which aborts their open
   transactions and fences them (ids are recorded, not guessed), except where a mirror keeps exactly the same
   lanes (same ids, same lane count, so every partition stays with the lane id it had): those the new lanes
   fence themselves as they start. With another lane count a partition moves to another lane id, so the old
   lane that had it must be fenced before any new lane reads where that partition stands.
3. Generation mark, phase "go": the new generation's lanes, waiting in standby with their clients made
   (`copying/standby.py`), start: fence their own ids, read the progress topic, copy.

Why marks and fencing: fencing stops every predecessor lane that had initialised its producer *before* step 2.
A predecessor lane that initialises *after* step 1 (its driver planned one more epoch before it saw the
handoff) reads the progress topic after its own init, so it reads the mark and stops without copying
(`copying.start.resume_positions`). The new lanes read the progress topic only after steps 2 and 3 and their
own fencing. Either way no record is copied by two generations.
"""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Producer

from ..progress import ensure_progress_topic, read_progress
from ..progress.record import failover_key, failover_value, generation_key, generation_value
from ..progress.state import ProgressState
from ..progress.state import failed_over_message
from ..credentials import SECRET_KEYS, RefusalGrace, conf_files_digest
from ..refusal import refusal
from ..resource.flowgroup import FlowGroupConfig, Predecessor
from ..resource.names import transactional_ids

_PRODUCERS: dict[str, tuple[str, Producer]] = {}
"""Mark writers by target client config without its secrets (-> the whole config and its files, the writer),
made in standby so the takeover does not wait for a connection."""
_ENSURED: set[tuple[str, str]] = set()  # (target client config, progress topic) known to exist

log = logging.getLogger(__name__)


class HandoffError(RuntimeError):
    """This generation must not copy (a later one took the flow group over), or the takeover failed."""


@dataclass
class Takeover:
    """What one takeover did and how long it took (reported on the Lease / the run display)."""

    generation: int
    groups: list[str]
    fenced: list[str] = field(default_factory=list)
    at_ms: int = 0
    took_ms: int = 0


def first_epoch(before: dict[str, dict], now: dict[str, dict]) -> dict[str, int] | None:
    """The first epoch a generation committed after its takeover, from its mirrors' stats snapshots
    (`MirrorStats.snapshot()`, by mirror) at the takeover and now: None until every mirror ended an epoch since;
    then when the last of them ended (`firstEpochMs`), the records they copied (`firstEpochRecords`: what built
    up while nobody copied, and what came during the epoch) and the longest any of those records waited from
    its source timestamp to its commit on the target (`latencyMaxMs`: the handoff's gap included, so the pause
    as this generation measured it)."""
    if not before or any((now.get(m) or {}).get("epochs", 0) <= b.get("epochs", 0) for m, b in before.items()):
        return None
    records, worst = 0, 0
    for m, b in before.items():
        old = {(p["source_topic"], p["partition"]): p["records_total"] for p in b.get("partitions") or []}
        for p in now[m].get("partitions") or []:
            copied = p["records_total"] - old.get((p["source_topic"], p["partition"]), 0)
            if copied > 0:
                records += copied
                worst = max(worst, p.get("latency_ms_max") or 0)
    return {"firstEpochMs": max(now[m].get("last_epoch_end_ms") or 0 for m in before),
            "firstEpochRecords": records, "latencyMaxMs": worst}


def marked(config: FlowGroupConfig, timeout: float = 60.0) -> Predecessor | None:
    """The highest generation marked for this flow group on any of its targets, with the ids its lanes held
    (None: no generation took the group over yet)."""
    return newest_mark(config, timeout)[0]


def newest_mark(config: FlowGroupConfig, timeout: float = 60.0) -> tuple[Predecessor | None, dict | None]:
    """`marked()`, and the active failover mark of the flow group on any of its targets (else None)."""
    return newest_of(config, marks_by_target(config, timeout))


def newest_of(config: FlowGroupConfig, states: dict[str, ProgressState]) -> tuple[Predecessor | None, dict | None]:
    """`newest_mark` of the marks already read (`marks_by_target`)."""
    best: Predecessor | None = None
    failover: dict | None = None
    of = (config.resource, config.resourceUid, config.name)
    for state in states.values():
        gen = state.generation(*of)
        if gen and (best is None or gen > best.generation):
            best = Predecessor(flowGroup=config.name, generation=gen, transactionalIds=state.generation_ids[of])
        failover = failover or state.failovers.get(of)
    return best, failover


def marks_by_target(config: FlowGroupConfig, timeout: float = 60.0) -> dict[str, ProgressState]:
    """Each target's progress topic read to its end (marks included), by target alias."""
    out = {}
    grace = RefusalGrace()
    for alias in sorted({m.target for m in config.mirrors}):
        while alias not in out:
            conf = config.cluster(alias).client_config()  # read again at every try: a Secret being rotated
            try:
                ensure_progress_topic(conf, config.progressTopic, timeout=min(timeout, 30.0),
                                      replication_factor=config.progressTopicReplicationFactor)
                out[alias] = read_progress(conf, config.progressTopic, timeout=timeout, resource=config.resource)
            except (KafkaException, TimeoutError):
                refused = refusal(conf, min(timeout, 10.0))  # librdkafka tells a refused login only its error callback
                if refused is None:
                    raise
                where = (f"flow group {config.name!r}: target cluster {alias!r} "
                         f"({config.cluster(alias).bootstrapServers}) refuses the mirror: {refused}")
                left = grace.refused(config.cluster(alias))
                if left is None:  # the same credentials refused for longer than credentials being rotated are
                    raise HandoffError(where) from None
                log.warning("%s; asked again for up to %.0f s more, as credentials being rotated are", where, left)
                time.sleep(min(left, 5.0))
    return out


def marked_generation(config: FlowGroupConfig, timeout: float = 60.0) -> int:
    m = marked(config, timeout)
    return m.generation if m is not None else 0


def superseded_why(config: FlowGroupConfig, timeout: float = 60.0, failover_only: bool = False,
                   states: dict[str, ProgressState] | None = None) -> str | None:
    """Why this generation must not copy: a later one took the flow group over, or it was failed over (None:
    nothing says so; with `failover_only`, also when a later generation took over without a failover)."""
    states = marks_by_target(config, timeout) if states is None else states
    last, failover = newest_of(config, states)
    if failover is not None:
        return failed_over_message(config.name, failover)
    gen = config.worker.generation
    if any(s.rolled_back(config.resource, config.resourceUid, config.name, gen) for s in states.values()):
        return (f"worker generation {gen} of flow group {config.name!r} of {config.resource} was rolled back: "
                f"generation {last.generation if last else 0} took the flow group back; it must not copy")
    if failover_only or last is None or last.generation <= gen:
        return None
    return (f"flow group {config.name!r} of {config.resource} was taken over by worker generation "
            f"{last.generation}; this is generation {config.worker.generation}: it must not copy")


def check_not_superseded(config: FlowGroupConfig, timeout: float = 60.0) -> dict[str, ProgressState]:
    """HandoffError when a later generation already took the flow group over (run it while in standby: it reads
    the whole progress topic, which the handoff itself should not wait for). Returns the marks read, by target."""
    states = marks_by_target(config, timeout)
    why = superseded_why(config, timeout, states=states)
    if why is not None:
        raise HandoffError(why)
    return states


def prepare(config: FlowGroupConfig) -> None:
    """In standby: the progress topics exist and the mark writers are connected."""
    for alias in sorted({m.target for m in config.mirrors}):
        conf = config.cluster(alias).client_config()
        ensure_progress_topic(conf, config.progressTopic, replication_factor=config.progressTopicReplicationFactor)
        _ENSURED.add((repr(sorted(conf.items())), config.progressTopic))
        _producer(conf, config).list_topics(config.progressTopic, timeout=30)


def take_over(config: FlowGroupConfig, timeout: float = 60.0) -> Takeover:
    """Supersede, fence, go (see the module docstring)."""
    t0 = time.monotonic()
    gen = config.worker.generation
    preds = config.worker.predecessors
    groups = sorted({config.name, *(p.flowGroup for p in preds)})
    at_ms = int(time.time() * 1000)
    targets = sorted({m.target for m in config.mirrors})
    for alias in targets:
        write_mark(config, alias, groups, at_ms, timeout, go=False)
    t_mark = time.monotonic()
    known = {c.alias for c in config.clusters}
    ids = sorted(_to_fence(config, preds, known))
    skipped = sorted({alias for p in preds for alias in p.transactionalIds if alias not in known})
    if skipped:  # a mirror to that target was removed: nothing of this generation writes there
        log.info("flow group %s: not fencing lanes on targets %s that this generation no longer writes to",
                 config.name, skipped)
    fence_all(config, set(ids), timeout)
    t_fenced = time.monotonic()
    for alias in targets:
        write_mark(config, alias, [config.name], at_ms, timeout, go=True)
    took = int((time.monotonic() - t0) * 1000)
    log.info("flow group %s: generation %d took over %s in %d ms (superseded in %d ms, %d other transactional "
             "ids fenced in %d ms)", config.name, gen, groups, took, (t_mark - t0) * 1000, len(ids),
             (t_fenced - t_mark) * 1000)
    return Takeover(gen, groups, [tid for _a, tid in ids], at_ms, took)


def _lanes_by_mirror(ids: dict[str, list[str]]) -> dict[tuple[str, str], set[str]]:
    """(target, mirror's id prefix) -> its lanes' ids."""
    out: dict[tuple[str, str], set[str]] = {}
    for alias, tids in ids.items():
        for tid in tids:
            out.setdefault((alias, tid.rsplit(".lane-", 1)[0]), set()).add(tid)
    return out


def _to_fence(config: FlowGroupConfig, preds: list[Predecessor], known: set[str]) -> set[tuple[str, str]]:
    """(target, id) of every predecessor lane, but those of mirrors whose lanes this generation keeps as they
    were (its own lanes fence them on start, keeping the pause short)."""
    own = _lanes_by_mirror(transactional_ids(config.resource, config.name, config.lane_routes()))
    out: set[tuple[str, str]] = set()
    for p in preds:
        for (alias, mirror), tids in _lanes_by_mirror(p.transactionalIds).items():
            if alias in known and own.get((alias, mirror)) != tids:
                out |= {(alias, t) for t in tids}
    return out


def _producer(conf: dict[str, str], config: FlowGroupConfig) -> Producer:
    """The kept mark writer for `conf`; one whose secrets (a password in `conf`, a certificate file it names)
    changed since replaces the one made with the old ones, which the cluster may refuse by now."""
    who = repr(sorted((k, v) for k, v in conf.items() if k not in SECRET_KEYS))
    key = repr(sorted(conf.items())) + conf_files_digest(conf)
    kept = _PRODUCERS.get(who)
    if kept is None or kept[0] != key:  # not idempotent: a mark written twice says the same
        kept = _PRODUCERS[who] = (key, Producer({**conf, "acks": "all", "linger.ms": 0,
                                                 "client.id": f"sparkmirror-takeover-{config.name}"}))
    return kept[1]


def write_mark(config: FlowGroupConfig, alias: str, groups: list[str], at_ms: int, timeout: float, go: bool,
               revoked: int = 0) -> None:
    """This config's generation mark, holding its lanes' ids, for `groups` on target `alias` (`revoked`: a
    take-back, see handoff/takeback.py)."""
    ids = transactional_ids(config.resource, config.name, config.lane_routes())
    marks = [(generation_key(config.resource, config.resourceUid, g),
              generation_value(config.worker.generation, config.name, at_ms, ids, go, revoked)) for g in groups]
    write_records(config, alias, marks, "generation mark", timeout)


def write_failover(config: FlowGroupConfig, alias: str, active: bool, at_ms: int, mirrors: list[str],
                   timeout: float) -> None:
    """The flow group's failover mark on target `alias` (active: failed over; else undone)."""
    write_records(config, alias, [(failover_key(config.resource, config.resourceUid, config.name),
                                   failover_value(active, at_ms, mirrors))], "failover mark", timeout)


def write_records(config: FlowGroupConfig, alias: str, records: list[tuple[bytes, bytes]], what: str,
                  timeout: float) -> None:
    """Plain (non-transactional) records -- marks, ACL records -- to the progress topic on target `alias`, made
    if missing; waits for them to be acknowledged (read_committed readers see them at once). HandoffError
    naming `what` when they are not."""
    conf = config.cluster(alias).client_config()
    if (repr(sorted(conf.items())), config.progressTopic) not in _ENSURED:
        ensure_progress_topic(conf, config.progressTopic, replication_factor=config.progressTopicReplicationFactor)
        _ENSURED.add((repr(sorted(conf.items())), config.progressTopic))
    errors: list[KafkaError] = []
    producer = _producer(conf, config)
    for key, value in records:
        producer.produce(config.progressTopic, key=key, value=value,
                         on_delivery=lambda err, _m: errors.append(err) if err is not None else None)
    left = producer.flush(timeout)
    if left or errors:
        why = errors[0].str() if errors else f"{left} not acknowledged in {timeout:.0f} s"
        raise HandoffError(f"flow group {config.name!r}: cannot write its {what} to the progress topic "
                           f"{config.progressTopic!r} on target {alias!r}: {why}")


def fence_all(config: FlowGroupConfig, ids: set[tuple[str, str]], timeout: float) -> None:
    """`_fence` every (target alias, transactional id), in parallel."""
    if ids:
        with ThreadPoolExecutor(max_workers=min(8, len(ids))) as pool:
            list(pool.map(lambda a: _fence(config, a[0], a[1], timeout), sorted(ids)))


def _fence(config: FlowGroupConfig, alias: str, tid: str, timeout: float) -> None:
    """init_transactions as `tid`: aborts its open transaction, bumps its epoch so its holder is fenced."""
    producer = Producer({**config.cluster(alias).client_config(), "transactional.id": tid,
                         "transaction.timeout.ms": config.transactionTimeoutMs, "client.id": f"{tid}.fence"})
    try:
        producer.init_transactions(timeout)
    except Exception as e:  # noqa: BLE001 - reported with the id and the target, the takeover fails
        raise HandoffError(f"flow group {config.name!r}: cannot fence transactional id {tid!r} on target "
                           f"{alias!r}: {e}") from None
    finally:
        producer.flush(1)
