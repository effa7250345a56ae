"""A mirror's record transforms (`mirrors[].transforms`, resource/transforms.py) compiled into one function per
record: `(topic, partition, offset, timestamp, key, value, headers) -> (key, value, headers) | None` (None: dropped).

Shared by everything that must see a source record as the copier writes it: the record path's writer, the
checkpoints' and failover's counting of copied records (`sourcecounter.SourceCounter`), `verify`'s source side.
A dropped record is like one filtered as a loop: not written, yet its offset lies inside the interval's progress
range, so `OffsetMap.translate` counts the copied records below a position with these same transforms and a
position on a dropped record lands on the next kept one.

Bad configuration is refused at start (`TransformRefused`, naming the field); a Python callable that raises or
returns something that is not a record stops the mirror (`TransformFailed`, naming the record), never skipping it.
"""
from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .replication import policy_for
from .resource.javaregex import compile_java
from .resource.transforms import AddHeader, DropJsonFields, DropRecords, PythonTransform, RenameHeader, Route

log = logging.getLogger(__name__)

Header = tuple[str, "bytes | None"]
Kvh = tuple["bytes | None", "bytes | None", "list[Header] | None"]
Step = Callable[[str, int, int, int, "bytes | None", "bytes | None", "list[Header] | None"], "Kvh | None"]


class TransformRefused(ValueError):
    """A transform that cannot run (a callable that does not import): bad configuration, found at start."""


class TransformFailed(RuntimeError):
    """A Python transform raised or returned something that is not a record: the mirror stops, naming it."""


@dataclass(slots=True)
class Record:
    """What a Python transform is given (and returns, changed or not). `headers` is a list of (name, bytes|None)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] = field(default_factory=list)


@dataclass
class Counts:
    """Per compiled chain: records dropped and values not JSON (dropJsonFields), for the logs and the summary."""

    dropped: int = 0
    not_json: int = 0


def _text(b: bytes | str) -> str:
    return b if isinstance(b, str) else b.decode("utf-8", "surrogateescape")


def _drop_records(t: DropRecords) -> Step:
    name, value_rx = t.header, compile_java(t.headerValue) if t.headerValue is not None else None
    key_rx = compile_java(t.key) if t.key is not None else None

    def step(topic, part, off, ts, k, v, h):
        if name is not None:
            if not h:
                return k, v, h
            for hn, hv in h:
                if hn == name and (value_rx is None or (hv is not None and value_rx.fullmatch(_text(hv)))):
                    break
            else:
                return k, v, h
        if key_rx is not None and (k is None or not key_rx.fullmatch(_text(k))):
            return k, v, h
        return None
    return step


def _drop_json_fields(t: DropJsonFields, counts: Counts, where: str) -> Step:
    paths = [p.split(".") for p in t.fields]

    def remove(obj: dict, path: list[str]) -> bool:
        for part in path[:-1]:
            obj = obj.get(part)
            if not isinstance(obj, dict):
                return False
        return obj.pop(path[-1], _MISSING) is not _MISSING

    def step(topic, part, off, ts, k, v, h):
        if v is None:
            return k, v, h
        try:
            obj = json.loads(v)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            counts.not_json += 1
            if counts.not_json == 1:
                log.warning("%s: %s[%d] offset %d: the value is not a JSON object; copied unchanged (further ones "
                            "are counted, not logged)", where, topic, part, off)
            return k, v, h
        removed = False
        for path in paths:
            removed = remove(obj, path) or removed
        if not removed:  # untouched: the bytes as they were, not a re-serialisation
            return k, v, h
        return k, json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode(), h
    return step


_MISSING = object()


def _rename_header(t: RenameHeader) -> Step:
    frm, to = t.from_, t.to

    def step(topic, part, off, ts, k, v, h):
        if h and any(n == frm for n, _ in h):
            h = [(to if n == frm else n, hv) for n, hv in h]
        return k, v, h
    return step


def _add_header(t: AddHeader) -> Step:
    header = (t.name, t.value.encode())

    def step(topic, part, off, ts, k, v, h):
        return k, v, [*(h or ()), header]
    return step


def load_callable(spec: str, where: str) -> Callable[[Record], "Record | None"]:
    """`module:function` imported, or TransformRefused naming the field."""
    module, _, name = spec.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except Exception as e:  # noqa: BLE001 - whatever the import raised is the user's to see, in one line
        raise TransformRefused(f"{where}.callable: cannot import {spec!r}: {type(e).__name__}: {e}") from None
    if not callable(fn):
        raise TransformRefused(f"{where}.callable: {spec!r} is not callable")
    return fn


def _python(t: PythonTransform, where: str) -> Step:
    fn = load_callable(t.callable, where)

    def step(topic, part, off, ts, k, v, h):
        try:
            out = fn(Record(topic, part, off, ts, k, v, list(h or ())))
        except Exception as e:  # noqa: BLE001 - named with the record, then the mirror stops
            raise TransformFailed(f"{where} ({t.callable}) raised on {topic}[{part}] offset {off}: "
                                  f"{type(e).__name__}: {e}") from e
        if out is None:
            return None
        if not isinstance(out, Record):
            raise TransformFailed(f"{where} ({t.callable}) returned {type(out).__name__} for {topic}[{part}] offset "
                                  f"{off}: expected a sparkmirror.transforms.Record or None")
        return out.key, out.value, out.headers or None
    return step


class RecordTransforms:
    """A mirror's transforms as one chain. `apply(...)` is the record as written, or None when dropped."""

    def __init__(self, transforms: Sequence, where: str = "transforms",
                 exempt: Callable[[str], bool] | None = None) -> None:
        self.counts = Counts()
        self.steps: list[Step] = []
        self._exempt = exempt  # topics whose records pass untouched: the mirror's heartbeats (see `compiled`)
        self._exempt_seen: dict[str, bool] = {}
        for i, t in enumerate(transforms):
            at = f"{where}[{i}]"
            if isinstance(t, DropRecords):
                self.steps.append(_drop_records(t))
            elif isinstance(t, DropJsonFields):
                self.steps.append(_drop_json_fields(t, self.counts, at))
            elif isinstance(t, RenameHeader):
                self.steps.append(_rename_header(t))
            elif isinstance(t, AddHeader):
                self.steps.append(_add_header(t))
            elif isinstance(t, PythonTransform):
                self.steps.append(_python(t, at))
            elif isinstance(t, Route):
                continue  # the remote topic's name (replication.policy_for), not the record's
            else:
                raise TransformRefused(f"{at}: unknown transform {type(t).__name__}")

    def __bool__(self) -> bool:
        return bool(self.steps)

    def apply(self, topic: str, part: int, off: int, ts: int, k, v, h) -> Kvh | None:
        if self._exempt is not None:
            exempt = self._exempt_seen.get(topic)
            if exempt is None:
                exempt = self._exempt_seen[topic] = self._exempt(topic)
            if exempt:
                return k, v, h
        for step in self.steps:
            out = step(topic, part, off, ts, k, v, h)
            if out is None:
                self.counts.dropped += 1
                return None
            k, v, h = out
        return k, v, h

    def keeps(self, m) -> bool:
        """Whether a confluent_kafka message would be written (the counters' question)."""
        return self.apply(m.topic(), m.partition(), m.offset(), m.timestamp()[1], m.key(), m.value(),
                          m.headers()) is not None


def compiled(mirror) -> RecordTransforms | None:
    """The chain of a flow-group `Mirror` (None when it has none but routes, or none at all). TransformRefused names
    the mirror's field.

    Heartbeats topics (the mirror's policy says which; MM2 mirrors them whatever the topic filter) pass untouched:
    their records are MM2's own binary format, which the heartbeat chain and MM2's tools read downstream. A user's
    transforms are written for the data topics; a JSON or Python transform meeting a heartbeat failed and stopped
    the mirror (seen in CI once another test had created `heartbeats` on the shared source cluster)."""
    ts = getattr(mirror, "transforms", None)
    if not ts:
        return None
    chain = RecordTransforms(ts, f"mirrors[{mirror.name}].transforms", exempt=policy_for(mirror).is_heartbeats_topic)
    return chain if chain else None


def check(configs: Sequence) -> None:
    """Every mirror's transforms compile (their callables import) here, at start: TransformRefused otherwise."""
    for cfg in configs:
        for mirror in cfg.mirrors:
            compiled(mirror)
