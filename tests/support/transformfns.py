"""Python record transforms for the tests (`python` transforms name them as `tests.support.transformfns:NAME`):
importable in the lanes' Python workers, which inherit the test's PYTHONPATH."""
from __future__ import annotations

import json

from sparkmirror.transforms import Record


def tag_and_drop_elevens(r: Record) -> Record | None:
    """Drops records whose JSON value's `seq` is a multiple of 11, stamps the rest with a `py` header."""
    seq = json.loads(r.value)["seq"]
    if seq % 11 == 0:
        return None
    r.headers.append(("py", str(seq * 2).encode()))
    return r


def shout(r: Record) -> Record:
    """A changed copy: the value upper-cased."""
    return Record(r.topic, r.partition, r.offset, r.timestamp, r.key, (r.value or b"").upper(), r.headers)


def explode(r: Record) -> Record:
    raise RuntimeError("no")


def not_a_record(r: Record) -> dict:
    return {"key": r.key}


NOT_CALLABLE = 3
