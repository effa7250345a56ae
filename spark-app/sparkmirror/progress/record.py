"""The progress record: one source partition's range committed by one transaction, and its topic's config.

Format (versioned, JSON):
  key   = JSON ["<source cluster alias>", "<source topic>", <partition>, "<namespace/name of the resource>"]
          (compaction keeps the latest; keys written before the resource was named have 3 elements and are
          read as belonging to whichever resource reads them)
  value = {"v": 1, "next": n, "src": [first, last], "tgt": [first, last], "tgtTopic": "...", "count": k,
           "commitMs": t, "gen": worker generation, "fg": flow group, "mirror": "...", "lane": i,
           "bytes": b, "recTotal": n, "bytesTotal": nb, "srcId": "<source topic id>", "tgtId": "<target topic id>"}
  a tombstone (null value) resets the key: the partition's progress starts over.

Generation marks share the topic (they must be read in the same read_committed pass as the progress, see
`handoff/takeover.py`):
  key   = JSON {"generationOf": ["<namespace/name>", "<resource uid>", "<flow group>"]}
  value = {"v": 1, "gen": n, "by": "<flow group that took over>", "atMs": t,
           "ids": {"<target alias>": [transactional ids of generation n's lanes]}, "go": false|true}
  written twice per takeover: "go": false supersedes the older generations, "go": true (after their lanes were
  fenced) lets the new generation's waiting lanes start. A generation that takes the flow group *back* from
  later ones that failed before their first commit (the Lease moved back, `handoff/takeback.py`) adds
  "revoked": r (> n): generations n+1..r are rolled back and never copy again. Marks are ranked by
  (max(gen, revoked), revoked > gen): the take-back outranks every mark of the generations it revoked, also one
  a late driver of theirs writes after it; a later generation's takeover outranks the take-back.
Failover marks too (`sparkmirror failover`), under a key of their own so that no generation mark replaces one:
  key   = JSON {"failoverOf": ["<namespace/name>", "<resource uid>", "<flow group>"]}
  value = {"v": 1, "active": true|false, "atMs": t, "mirrors": ["<mirror>", ...]}
  while active, no worker generation of the flow group copies, whatever its number; `failover --undo` writes
  "active": false.
ACL records (ACL sync, `aclsync.py`), one per mirror: what the mirror created on this target and still owns,
so that it removes only bindings it made, never hand-made ones:
  key   = JSON {"aclsOf": ["<namespace/name>", "<mirror>"]}
  value = {"v": 1, "bindings": [[resourceType, name, patternType, principal, host, operation, permission], ...],
           "atMs": t}   (enum names as strings: ["TOPIC", "a.orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"])
  rewritten whole by the mirror (its only writer) after each ACL sync that changed what it owns.
Topic records (deletion propagation, `topicdeletion.py`), one per remote topic the mirror created, so that it
deletes only topics it made, never one that was there before or that someone else made:
  key   = JSON {"topicOf": ["<namespace/name>", "<mirror>", "<remote topic>"]}
  value = {"v": 1, "src": "<source topic>", "srcId": "<source topic id>", "tgtId": "<remote topic id>",
           "createdMs": t, "goneMs": t | null, "deletedMs": t | null}
  written when topic sync creates the remote topic, again with "goneMs" when its source topic is first seen gone
  or recreated (the grace period's clock, so it survives restarts), without it when the source is back, and
  with "deletedMs" once the mirror deleted the remote topic; a tombstone forgets a topic someone else deleted
  or replaced.
Anchors (the offset map beyond compaction): compaction keeps one value per progress key, so the dense map of
older ranges is lost within minutes, and a consumer group lagging behind it could not be translated. So the first
range a lane commits in each block of `ANCHOR_EVERY` source offsets of a partition (a lane that resumes knows
the block it resumes in from its progress) is also written, in the same transaction and after its progress record, under a key of its own:
  key   = JSON {"anchorOf": ["<source cluster alias>", "<source topic>", <partition>, "<namespace/name>", block]}
  value = the progress record's value, unchanged
Compaction keeps one range per block, so a partition's map keeps a range every ~`ANCHOR_EVERY` offsets as long
as the key lives; between two ranges held, translation counts records on both clusters
(`sourcecounter.SourceCounter.between`), never more than about one block. Readers put anchors into the offset map
only, never into the latest record or the totals. An anchor lives as long as its key: one record (~350 bytes) per
block a partition ever mirrored (20,000 for a billion offsets), read with the rest of the topic at lane start.
Marks and ACL records are not progress: readers keep them apart and never count them; a mark key of a kind this
version does not know is skipped, so a later kind does not stop an older reader.
Ranges are inclusive offsets; `count` is how many records the range held (ranges can contain gaps: source
transaction markers, aborted records; target transaction markers). A range that wrote nothing (every record
skipped) has count 0 and target range [-1, -1]. `bytes` is the key and value bytes those records carried on the
record path, the bytes of the record batches written on the batch path (framing included, compressed as the source
wrote them: the batch path decodes nothing) (added within version 1: a record written before it reads as 0), so byte rates come from what was committed, like record
rates. `srcId`/`tgtId` are the topics' Kafka topic ids (KIP-516; added within version 1, empty when unknown):
a topic deleted and created again under the same name gets a new id, so a lane starting from this record
knows its source or its remote topic is not the one it mirrored (copying/start.py).
`recTotal` / `bytesTotal` are the records and bytes mirrored for the key since its progress started, this range
included (added within version 1; -1 when absent): the lane carries them on from the record it resumed from, so
the exported `_total` counters survive driver restarts and compaction of the history they summed before.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from sys import intern

PROGRESS_FORMAT_VERSION = 1

# Compacted, and compacted soon enough that reading it back at lane start stays cheap.
PROGRESS_TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.ms": str(10 * 60 * 1000),
    "min.cleanable.dirty.ratio": "0.1",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": str(24 * 3600 * 1000),
}

SourcePartition = tuple[str, str, int]
"""(source cluster alias, source topic, partition): what a progress key names."""


def progress_key(source_cluster: str, topic: str, partition: int, resource: str | None = None) -> bytes:
    """Deterministic bytes, so compaction keeps exactly one latest value per source partition and resource."""
    parts: list = [source_cluster, topic, partition] + ([resource] if resource else [])
    return json.dumps(parts, separators=(",", ":")).encode()


def decode_key(key: bytes) -> tuple[SourcePartition, str | None]:
    """(source partition, resource or None for a key written before resources were named)."""
    k = json.loads(key)
    if not isinstance(k, list) or len(k) not in (3, 4):
        raise ValueError(f"not a progress key: {key[:200]!r}")
    return (k[0], k[1], int(k[2])), (k[3] if len(k) == 4 else None)


GenerationOf = tuple[str, str, str]
"""(resource namespace/name, resource uid, flow group): whose worker generation a generation mark names."""


def generation_key(resource: str, uid: str, flow_group: str) -> bytes:
    return json.dumps({"generationOf": [resource, uid, flow_group]}, separators=(",", ":")).encode()


def generation_value(generation: int, by: str, at_ms: int, ids: dict[str, list[str]], go: bool,
                     revoked: int = 0) -> bytes:
    return json.dumps({"v": PROGRESS_FORMAT_VERSION, "gen": generation, "by": by, "atMs": at_ms, "ids": ids,
                       "go": go, **({"revoked": revoked} if revoked > generation else {})},
                      separators=(",", ":")).encode()


def failover_key(resource: str, uid: str, flow_group: str) -> bytes:
    return json.dumps({"failoverOf": [resource, uid, flow_group]}, separators=(",", ":")).encode()


def failover_value(active: bool, at_ms: int, mirrors: list[str]) -> bytes:
    return json.dumps({"v": PROGRESS_FORMAT_VERSION, "active": active, "atMs": at_ms, "mirrors": mirrors},
                      separators=(",", ":")).encode()


AclsOf = tuple[str, str]
"""(resource namespace/name, mirror): whose created ACLs an ACL record lists."""

MARK_KINDS = ("generationOf", "failoverOf", "aclsOf", "anchorOf", "topicOf")

ANCHOR_EVERY = 50_000
"""Source offsets per anchor block: bounds what translating a long-compacted offset reads on each cluster."""


def anchor_block(source_first: int) -> int:
    return source_first // ANCHOR_EVERY


def anchor_key(source_cluster: str, topic: str, partition: int, resource: str | None, block: int) -> bytes:
    return json.dumps({"anchorOf": [source_cluster, topic, partition, resource or "", block]},
                      separators=(",", ":")).encode()


def acls_key(resource: str, mirror: str) -> bytes:
    return json.dumps({"aclsOf": [resource, mirror]}, separators=(",", ":")).encode()


def acls_value(bindings: list[list[str]], at_ms: int) -> bytes:
    return json.dumps({"v": PROGRESS_FORMAT_VERSION, "bindings": bindings, "atMs": at_ms},
                      separators=(",", ":")).encode()


TopicOf = tuple[str, str, str]
"""(resource namespace/name, mirror, remote topic): which created remote topic a topic record is about."""


def topic_key(resource: str, mirror: str, remote: str) -> bytes:
    return json.dumps({"topicOf": [resource, mirror, remote]}, separators=(",", ":")).encode()


def decode_mark_key(key: bytes | None) -> tuple[str, tuple[str, ...]] | None:
    """(kind, whose) of a mark's key -- ("generationOf" | "failoverOf", (resource, uid, flow group)),
    ("aclsOf", (resource, mirror)) or ("anchorOf", (cluster, topic, partition, resource, block)) -- or None when `key` is a progress key. A JSON object of another kind (a
    later version's) is (its kind, ()), for readers to skip."""
    if not key or not key.startswith(b"{"):
        return None
    k = json.loads(key)
    if not isinstance(k, dict) or not k:
        raise ValueError(f"not a mark key: {key[:200]!r}")
    kind = next((m for m in MARK_KINDS if m in k), None)
    if kind is None:
        return str(next(iter(k))), ()
    if kind == "aclsOf":
        resource, mirror = k[kind]
        return kind, (resource, mirror)
    if kind == "topicOf":
        resource, mirror, remote = k[kind]
        return kind, (resource, mirror, remote)
    if kind == "anchorOf":
        cluster, topic, partition, resource, block = k[kind]
        return kind, (cluster, topic, int(partition), resource, int(block))
    resource, uid, group = k[kind]
    return kind, (resource, uid, group)


@dataclass(frozen=True, slots=True)
class ProgressRecord:
    """What one transaction committed for one source partition. Readers hold many of these (the offset map):
    slots and interned names keep one at about a fifth of a plain dataclass with fresh strings."""

    source_cluster: str
    source_topic: str
    partition: int
    next_offset: int
    source_first: int
    source_last: int
    target_topic: str
    target_first: int
    target_last: int
    count: int
    commit_ms: int
    generation: int
    flow_group: str = ""
    mirror: str = ""
    lane: int = -1
    bytes: int = 0
    resource: str | None = None
    source_topic_id: str = ""
    target_topic_id: str = ""
    records_total: int = -1  # records mirrored for this key since its progress started, this range included
    bytes_total: int = -1    # the same in key + value bytes (-1: written before the totals were)

    @property
    def source_partition(self) -> SourcePartition:
        return self.source_cluster, self.source_topic, self.partition

    def key(self) -> bytes:
        return progress_key(self.source_cluster, self.source_topic, self.partition, self.resource)

    def anchor_key(self) -> bytes:
        return anchor_key(self.source_cluster, self.source_topic, self.partition, self.resource,
                          anchor_block(self.source_first))

    def value(self) -> bytes:
        return json.dumps({
            "v": PROGRESS_FORMAT_VERSION, "next": self.next_offset,
            "src": [self.source_first, self.source_last], "tgt": [self.target_first, self.target_last],
            "tgtTopic": self.target_topic, "count": self.count, "commitMs": self.commit_ms,
            "gen": self.generation, "fg": self.flow_group, "mirror": self.mirror, "lane": self.lane,
            "bytes": self.bytes, "recTotal": self.records_total, "bytesTotal": self.bytes_total,
            "srcId": self.source_topic_id, "tgtId": self.target_topic_id,
        }, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> "ProgressRecord":
        (cluster, topic, partition), resource = decode_key(key)
        v = json.loads(value)
        if v.get("v") != PROGRESS_FORMAT_VERSION:
            raise ValueError(f"progress record for {cluster}/{topic}/{partition} has format version "
                             f"{v.get('v')!r}; this job reads version {PROGRESS_FORMAT_VERSION}")
        return cls(intern(cluster), intern(topic), partition, int(v["next"]), int(v["src"][0]), int(v["src"][1]),
                   intern(v["tgtTopic"]), int(v["tgt"][0]), int(v["tgt"][1]), int(v["count"]), int(v["commitMs"]),
                   int(v["gen"]), intern(v.get("fg", "")), intern(v.get("mirror", "")), int(v.get("lane", -1)),
                   int(v.get("bytes", 0)), intern(resource) if resource else resource, intern(v.get("srcId", "")),
                   intern(v.get("tgtId", "")), int(v.get("recTotal", -1)), int(v.get("bytesTotal", -1)))
