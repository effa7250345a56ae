"""The benchmark's data: topic layout, preloading with keys and headers, and scanning a cluster to check it.

Every record carries its sequence number (unique per source topic) in its key and in a `seq` header, so a
scan of the target can count duplicates, check partition placement and compare a per-partition
fingerprint of key, value, headers and timestamp against the same fingerprint taken on the source.
"""
from __future__ import annotations

import os
import time
import zlib
from dataclasses import asdict, dataclass, field, replace

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from sparkmirror.topicplan import metadata_batches

ORIGIN = b"sparkmirror-bench"
ADMIN_REQUEST_TIMEOUT = 60.0  # librdkafka's timeout of the bench's polling admin requests (end_offsets says why)
_FILLER = os.urandom(1 << 20)
MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    value_size: int
    records: int
    compression: str = "none"  # how the preload's producer compresses this topic's batches

    def value(self, seq: int) -> bytes:
        """Random bytes after the sequence number; on a compressed topic half of them repeated, so the codec
        halves the batch: librdkafka sends a batch uncompressed when compressing does not shrink it (a Java
        producer compresses anyway), and the "1 KiB lz4" topics of random values held uncompressed batches
        until 2026-11-29 (the batch path merged them as it merges any small uncompressed batch)."""
        head = b"%012d|" % seq
        n = self.value_size - len(head)
        if self.compression == "none":
            off = (seq * 7919) % (len(_FILLER) - n)
            return head + _FILLER[off:off + n]
        half = (n + 1) // 2
        off = (seq * 7919) % (len(_FILLER) - half)
        return (head + _FILLER[off:off + half] * 2)[:self.value_size]


def codec_of(label: str) -> str:
    """The codec a size's topics are preloaded with: "b1k-lz4" -> "lz4", "b1k" -> "none"."""
    return label.rsplit("-", 1)[1] if "-" in label else "none"


def size_name(value_size: int, label: str = "") -> str:
    """How a record size is named in the report: "1 KiB", "100 B", "1 KiB lz4"."""
    name = f"{value_size // 1024} KiB" if value_size % 1024 == 0 else f"{value_size} B"
    codec = codec_of(label)
    return name if codec == "none" else f"{name} {codec}"


@dataclass(frozen=True)
class Layout:
    """N records of 1 KiB and N of 100 B, each size spread over `topics_per_size` topics.

    Topic names depend only on the size's label, so `only(label)` names the same topics as the full layout.
    """

    records_per_size: int
    partitions_per_topic: int = 4
    topics_per_size: int = 2
    prefix: str = ""
    sizes: tuple[tuple[str, int], ...] = (("b1k", 1024), ("b100", 100), ("b1k-lz4", 1024))
    """(label, record size); a label ending in `-<codec>` is preloaded compressed with that codec."""
    records_by_label: tuple[tuple[str, int], ...] = ()
    """(label, records) for the sizes that need another count than `records_per_size`: a copy window of 20 s for
    the fastest contender needs over three times as many records of 100 B as of 1 KiB."""

    def records_of(self, label: str) -> int:
        return dict(self.records_by_label).get(label, self.records_per_size)

    @property
    def topics(self) -> list[TopicSpec]:
        out = []
        for label, size in self.sizes:
            base, extra = divmod(self.records_of(label), self.topics_per_size)
            for i in range(self.topics_per_size):
                out.append(TopicSpec(f"{self.prefix}{label}-{i}", self.partitions_per_topic, size,
                                     base + (1 if i < extra else 0), codec_of(label)))
        return out

    @property
    def total_records(self) -> int:
        return sum(t.records for t in self.topics)

    @property
    def payload_bytes(self) -> int:
        """Keys, values and headers of all records (what a mirror copies, without Kafka's framing)."""
        hdr = len("seq") + len("origin") + len(ORIGIN)
        return sum(t.records * (t.value_size + 12 + hdr) + sum(len(str(i)) for i in range(t.records))
                   for t in self.topics)

    @property
    def label(self) -> str:
        """Short id of the sizes this layout holds, for directory names: "b1k", "b1k+b100"."""
        return "+".join(label for label, _ in self.sizes)

    @property
    def size_name(self) -> str:
        """The sizes this layout holds as the report names them: "1 KiB", "1 KiB + 100 B"."""
        return " + ".join(size_name(size, label) for label, size in self.sizes)

    def only(self, label: str) -> "Layout":
        """The topics of one record size (same names as in this layout), so a run can mirror just those."""
        picked = tuple(s for s in self.sizes if s[0] == label)
        if not picked:
            raise ValueError(f"no record size {label!r}; known: {[lb for lb, _ in self.sizes]}")
        return replace(self, sizes=picked)

    @property
    def pattern(self) -> str:
        return "|".join(t.name.replace(".", r"\.") for t in self.topics)


def key_of(seq: int) -> bytes:
    return b"%012d" % seq


def headers_of(seq: int, ts: int | None = None) -> list[tuple[str, bytes]]:
    h = [("seq", b"%d" % seq), ("origin", ORIGIN)]
    if ts is not None:
        h.append(("ts", b"%d" % ts))
    return h


def create_topics(bootstrap: str, specs: list[tuple[str, int]], config: dict[str, str] | None = None,
                  timeout: float = 60.0) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # a KRaft controller refuses a request of over 10,000 metadata records: 1,000 topics of 10 partitions need several
    for batch in metadata_batches(specs, lambda s: s[1] + 1 + len(config or {})):
        futs = admin.create_topics([NewTopic(n, num_partitions=p, replication_factor=1, config=config or {})
                                    for n, p in batch], operation_timeout=timeout)
        for f in futs.values():
            f.result(timeout=timeout)
    # wait for metadata so producers do not race the creation; a broker applies thousands of new partitions
    # slowly (1,000 topics of 10 partitions took over 60 s on the loaded 2 cores once), so give it 3 minutes
    deadline = time.monotonic() + (max(timeout, 180.0) if len(specs) > 100 else timeout)
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5)
        if all(n in md.topics and len(md.topics[n].partitions) == p and md.topics[n].error is None
               for n, p in specs):
            return
        time.sleep(0.1)
    raise TimeoutError(f"topics {specs} not visible after {timeout}s")


BULK_PRODUCER = {
    "linger.ms": 20,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_097_151,
    "compression.type": "none",
    "acks": "all",
    "enable.idempotence": True,
}


PRELOAD_PRODUCER = {**BULK_PRODUCER, "batch.size": 16384, "linger.ms": 5}
"""The preload writes batches as a stock Java producer does (batch.size 16 KiB, linger.ms 5): the mirrors read
what most clusters hold, not huge batches that would flatter a path copying whole batches (issue 36)."""


def source_batch_sizes(bootstrap: str, topic: str, partition: int = 0) -> dict[str, float]:
    """Records and bytes per stored batch of one preloaded partition, as a Fetch returns them."""
    from sparkmirror.copying.batchreader import BatchReader
    from sparkmirror.wire.cluster import Wire

    wire = Wire({"bootstrap.servers": bootstrap})
    try:
        reader = BatchReader(wire)
        reader.assign({(topic, partition): 0})
        batches = records = nbytes = 0
        while True:
            got = reader.fetch().get((topic, partition))
            if got is None:
                continue
            batches += len(got.batches)
            records += got.record_count
            nbytes += sum(len(b.raw) for b in got.batches)
            if got.next_offset >= got.high_watermark:
                break
        return {"batches": batches, "records_per_batch": round(records / max(batches, 1), 1),
                "bytes_per_batch": round(nbytes / max(batches, 1))}
    finally:
        wire.close()


def preload(bootstrap: str, layout: Layout) -> float:
    """Create the layout's topics and fill them; returns seconds taken."""
    t0 = time.monotonic()
    create_topics(bootstrap, [(t.name, t.partitions) for t in layout.topics])
    producers = {codec: Producer({"bootstrap.servers": bootstrap, **PRELOAD_PRODUCER, "compression.type": codec})
                 for codec in {t.compression for t in layout.topics}}
    errors: list[str] = []

    def on_delivery(err, _msg):  # noqa: ANN001
        if err is not None:
            errors.append(str(err))

    for t in layout.topics:
        p = producers[t.compression]
        for seq in range(t.records):
            args = dict(value=t.value(seq), key=key_of(seq), partition=seq % t.partitions,
                        headers=headers_of(seq), on_delivery=on_delivery if seq % 1000 == 0 else None)
            while True:
                try:
                    p.produce(t.name, **args)
                    break
                except BufferError:
                    p.poll(0.05)
            if seq % 10000 == 0:
                p.poll(0)
    left = sum(p.flush(300) for p in producers.values())
    if left or errors:
        raise RuntimeError(f"preload failed: {left} undelivered, errors {errors[:3]}")
    return time.monotonic() - t0


@dataclass
class PartitionScan:
    count: int = 0        # distinct records (by sequence number)
    dups: int = 0         # records seen again
    misplaced: int = 0    # records whose partition is not the one their sequence number says
    fingerprint: int = 0  # sum over distinct records of crc(key, value, headers) + timestamp, mod 2^64


@dataclass
class ScanResult:
    partitions: dict[str, PartitionScan] = field(default_factory=dict)  # "topic/partition" -> scan
    # latency scans: (source ts from the record's `ts` header, target timestamp) pairs
    latencies_ms: list[int] = field(default_factory=list)
    latency_src_ts: list[int] = field(default_factory=list)  # source timestamps, same order
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return sum(p.count for p in self.partitions.values())

    @property
    def dups(self) -> int:
        return sum(p.dups for p in self.partitions.values())

    @property
    def misplaced(self) -> int:
        return sum(p.misplaced for p in self.partitions.values())

    def to_json(self) -> dict:
        return {k: asdict(v) for k, v in self.partitions.items()}

    def only(self, topics: set[str]) -> "ScanResult":
        """The partitions of `topics` alone: what a run that mirrors only those topics is compared with."""
        return ScanResult({k: v for k, v in self.partitions.items() if k.rsplit("/", 1)[0] in topics},
                          seconds=self.seconds)


def scan(bootstrap: str, topics: dict[str, TopicSpec], *, with_timestamp: bool = True,
         latency_window: tuple[int, int] | None = None, timeout: float = 600.0) -> ScanResult:
    """Read `topics` (name as it exists on this cluster -> source spec) to their end, read_committed.

    With `latency_window=(from_ms, to_ms)`, also collects target timestamp minus the `ts` header for
    records whose `ts` lies inside the window.
    """
    t0 = time.monotonic()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-scan", "enable.auto.commit": False,
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "fetch.max.bytes": 64 * 1024 * 1024, "max.partition.fetch.bytes": 8 * 1024 * 1024,
                  "queued.max.messages.kbytes": 262144})
    res = ScanResult()
    seen: dict[str, bytearray] = {}
    try:
        md = c.list_topics(timeout=30)
        tps = []
        for name, spec in topics.items():
            if name not in md.topics or md.topics[name].error is not None:
                for p in range(spec.partitions):
                    res.partitions[f"{name}/{p}"] = PartitionScan()
                continue
            seen[name] = bytearray(spec.records)
            for p in md.topics[name].partitions:
                res.partitions[f"{name}/{p}"] = PartitionScan()
                tps.append(TopicPartition(name, p, -2))
        if not tps:
            return res
        c.assign(tps)
        pending = {(tp.topic, tp.partition) for tp in tps}
        deadline = time.monotonic() + timeout
        crc = zlib.crc32
        lat = res.latencies_ms
        lat_ts = res.latency_src_ts
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"scan of {bootstrap} did not reach the end of {sorted(pending)[:5]}")
            for m in c.consume(num_messages=20000, timeout=0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard((m.topic(), m.partition()))
                        continue
                    raise RuntimeError(f"scan of {bootstrap}: {err}")
                topic, part = m.topic(), m.partition()
                ps = res.partitions[f"{topic}/{part}"]
                key = m.key()
                seq = int(key)
                spec = topics[topic]
                bits = seen[topic]
                if seq >= len(bits):
                    ps.misplaced += 1
                    continue
                if bits[seq]:
                    ps.dups += 1
                    continue
                bits[seq] = 1
                if seq % spec.partitions != part:
                    ps.misplaced += 1
                h = crc(m.value(), crc(key))
                src_ts = None
                for hk, hv in m.headers() or ():
                    if hk == "ts":
                        src_ts = int(hv)
                    h = crc(hv, crc(hk.encode(), h))
                ts = m.timestamp()[1]
                if with_timestamp:
                    h += ts
                ps.fingerprint = (ps.fingerprint + h) & MASK64
                ps.count += 1
                if latency_window is not None and src_ts is not None and \
                        latency_window[0] <= src_ts <= latency_window[1]:
                    lat.append(ts - src_ts)
                    lat_ts.append(src_ts)
    finally:
        c.close()
    res.seconds = time.monotonic() - t0
    return res


def compare(source: ScanResult, target: ScanResult, rename: dict[str, str], exactly_once: bool) -> list[str]:
    """Problems found comparing a target scan with the source scan ([] = the target holds exactly the source)."""
    problems = []
    for key, sp in source.partitions.items():
        topic, part = key.rsplit("/", 1)
        tkey = f"{rename[topic]}/{part}"
        tp = target.partitions.get(tkey)
        if tp is None:
            problems.append(f"{tkey}: missing on target")
            continue
        if tp.count != sp.count:
            problems.append(f"{tkey}: {tp.count} distinct records, source {key} has {sp.count}")
        elif tp.fingerprint != sp.fingerprint:
            problems.append(f"{tkey}: records differ from {key} (key, value, headers or timestamp)")
        if tp.misplaced:
            problems.append(f"{tkey}: {tp.misplaced} records in the wrong partition")
        if exactly_once and tp.dups:
            problems.append(f"{tkey}: {tp.dups} duplicates (exactly-once)")
    return problems


def end_offsets(admin: AdminClient, tps: list[TopicPartition], timeout: float | None = None
                ) -> dict[tuple[str, int], int]:
    """Read-committed end offsets (last stable offsets); partitions whose topic is missing are left out.

    The default timeout grows with the partitions asked for (5 s, plus 1 s a 500): at 10,000 partitions on a
    loaded 2-core machine the answer took longer than 5 s, every poll of the scale benchmark came back empty,
    and its run timed out saying that no record had reached the target.

    The caller waits `timeout` in all; librdkafka's own request timeout is longer (ADMIN_REQUEST_TIMEOUT), so
    a slow answer is left to arrive rather than timed out inside librdkafka, whose admin requests that time
    out while their answer is on its way can abort the process (librdkafka #4605, `eonce->refcnt > 0`): a
    bench smoke's pytest process aborted here once, in this call's wait, on a loaded machine."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    if timeout is None:
        timeout = 5.0 + len(tps) / 500
    deadline = time.monotonic() + timeout
    futs = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, isolation_level=IsolationLevel.READ_COMMITTED,
                              request_timeout=max(timeout, ADMIN_REQUEST_TIMEOUT))
    out = {}
    for tp, f in futs.items():
        try:
            out[(tp.topic, tp.partition)] = f.result(timeout=max(deadline - time.monotonic(), 0.01)).offset
        except Exception:  # noqa: BLE001 - topic not there yet, or not answered in time
            pass
    return out
