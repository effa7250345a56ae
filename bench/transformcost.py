"""What each record transform (issue 38, `mirrors[].transforms`) costs per record, in CPU on one core, printed:

    python -m bench.transformcost [-n 200000] [--value-bytes 300] [--out bench/results/transformcost.json]

No Kafka: the compiled chain (`sparkmirror.transforms.RecordTransforms.apply`) the record path's writer calls for every
record, on records like the lanes see (a key, a JSON value of about --value-bytes, three headers). Each transform
alone, then all of them in one chain, each figure less the cost of calling an empty chain's loop: what a mirror pays
on top of copying the record (what copying costs: `python -m bench.batchcost`). Then the batch
path's (`copying/transformbatch.py`): batches of --batch records decoded, run through the chain and, when touched,
rebuilt, per record, for a chain that touches nothing (the batch still goes as bytes) and one that drops a record
of each batch. Figures are printed and written to --out with the commit they ran on, never asserted: they depend
on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from sparkmirror.resource.flowgroup import Mirror
from sparkmirror.transforms import RecordTransforms, compiled

from .gitstate import commit

REPO = Path(__file__).resolve().parent.parent

CASES: list[tuple[str, list[dict]]] = [
    ("dropRecords header+value", [{"type": "dropRecords", "header": "kind", "headerValue": "debug|trace"}]),
    ("dropRecords key regex", [{"type": "dropRecords", "key": r"tmp-\d+"}]),
    ("dropJsonFields (2 fields)", [{"type": "dropJsonFields", "fields": ["secret", "customer.email"]}]),
    ("dropJsonFields (absent)", [{"type": "dropJsonFields", "fields": ["nothere"]}]),
    ("renameHeader", [{"type": "renameHeader", "from": "trace", "to": "x-trace"}]),
    ("addHeader", [{"type": "addHeader", "name": "via", "value": "sparkmirror"}]),
    ("python (identity)", [{"type": "python", "callable": "bench.transformcost:identity"}]),
]


def identity(r):
    return r


def records(n: int, value_bytes: int) -> list[tuple]:
    pad = "x" * max(0, value_bytes - 120)
    out = []
    for i in range(n):
        value = json.dumps({"id": i, "secret": "s", "customer": {"email": "e@x", "name": "n"}, "pad": pad}).encode()
        out.append((f"key-{i}".encode(), value, [("kind", b"info"), ("trace", b"t-%d" % i), ("app", b"orders")]))
    return out


def per_record_ns(chain: RecordTransforms, recs: list[tuple]) -> float:
    apply = chain.apply
    t0 = time.process_time()
    for off, (k, v, h) in enumerate(recs):
        apply("t", 0, off, 0, k, v, h)
    return (time.process_time() - t0) * 1e9 / len(recs)


def chain_of(transforms: list[dict]) -> RecordTransforms:
    c = compiled(Mirror(name="bench", source="a", target="b", transforms=transforms))
    return c if c is not None else RecordTransforms([])


def batches(recs: list[tuple], size: int) -> list:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    from sparkmirror.copying.batches import split_batches

    out = []
    for i in range(0, len(recs), size):
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                      producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
        for j, (k, v, h) in enumerate(recs[i:i + size]):
            b.append(j, timestamp=1000, key=k, value=v, headers=h)
        out += split_batches(bytes(b.build()))
    return out


def batch_per_record_ns(chain: RecordTransforms, bs: list) -> float:
    from sparkmirror.copying.transformbatch import transform_batch

    t0 = time.process_time()
    for b in bs:
        transform_batch(b, chain, "t", 0, 0)
    return (time.process_time() - t0) * 1e9 / sum(b.record_count for b in bs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.transformcost")
    ap.add_argument("-n", type=int, default=200_000)
    ap.add_argument("--value-bytes", type=int, default=300)
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "transformcost.json")
    args = ap.parse_args(argv)
    at = commit(REPO)  # taken before the run: the code measured
    load_start = os.getloadavg()[0]
    recs = records(args.n, args.value_bytes)
    base = min(per_record_ns(RecordTransforms([]), recs) for _ in range(3))
    print(f"{args.n} records, JSON values of ~{args.value_bytes} bytes, 3 headers; CPU per record above an empty "
          f"chain's loop ({base:.0f} ns):")
    everything = [t for _, ts in CASES for t in ts]
    record_path: dict[str, float] = {}
    for name, ts in [*CASES, ("all of the above, one chain", everything)]:
        ns = min(per_record_ns(chain_of(ts), recs) for _ in range(3)) - base
        record_path[name] = round(ns / 1000, 3)
        print(f"  {name:32s} {ns / 1000:7.2f} us")
    bs = batches(recs, args.batch)
    print(f"batch path, batches of {args.batch} records, CPU per record (decode + chain + rebuild when touched):")
    batch_path: dict[str, float] = {}
    for name, ts in (("untouched (goes as bytes)", [{"type": "dropRecords", "key": "none"}]),
                     ("one record a batch dropped", [{"type": "dropRecords", "key": r"key-\d*00"}]),
                     ("addHeader (every batch rebuilt)", [{"type": "addHeader", "name": "via", "value": "x"}])):
        ns = min(batch_per_record_ns(chain_of(ts), bs) for _ in range(3))
        batch_path[name] = round(ns / 1000, 3)
        print(f"  {name:32s} {ns / 1000:7.2f} us")
    doc = {"what": "CPU microseconds per record each record transform adds (issue 38), one core",
           "commit": at, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "records": args.n,
           "value_bytes": args.value_bytes, "batch_records": args.batch, "empty_chain_ns": round(base),
           "record_path_us_above_empty_chain": record_path, "batch_path_us_per_record": batch_path,
           "cpus": os.cpu_count(), "load_avg_1m": [load_start, os.getloadavg()[0]]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
