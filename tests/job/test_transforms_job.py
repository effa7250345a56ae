"""Record transforms under exactly-once with crashes (issue 38): every built-in (a route too) and a Python callable on
one mirror, the job SIGKILLed twice mid-stream, then both topics read whole. Every kept record is on the routed
remote topic exactly once and in order, changed as configured; none of the dropped ones is; a consumer group
committed on dropped records is translated to the next kept one; `verify`'s comparison of every committed range
finds them equal."""
from __future__ import annotations

import json
import random
import signal
import time

import pytest

from sparkmirror.checkpoints import CheckpointEmitter
from sparkmirror.replication import PROVENANCE_HEADER
from sparkmirror.verify.compare import check_range
from sparkmirror.verify.run import committed_ranges
from sparkmirror_dev.testing import NumberedProducer, commit_group, unique_name

from tests.support.campaign import RECORDS_IN_CAMPAIGN

from .conftest import read_topic, wait_for

pytestmark = pytest.mark.minutes(2.2)

PARTS = 2
TRANSFORMS = [
    {"type": "dropRecords", "header": "kind", "headerValue": "debug"},   # seq % 5 == 0
    {"type": "dropRecords", "key": r"k\d*7"},                             # seq ending in 7
    {"type": "dropJsonFields", "fields": ["secret", "customer.email"]},
    {"type": "renameHeader", "from": "trace", "to": "x-trace"},
    {"type": "addHeader", "name": "via", "value": "sparkmirror"},
    {"type": "python", "callable": "tests.support.transformfns:tag_and_drop_elevens"},  # seq % 11 == 0, "py"
    {"type": "route", "topics": r"a\.(.*)", "replacement": "dr-$1"},     # the remote topic's name
]


def kept(seq: int) -> bool:
    return seq % 5 != 0 and not str(seq).endswith("7") and seq % 11 != 0


def source_record(part: int, seq: int) -> tuple[bytes, bytes, list]:
    value = {"seq": seq, "p": part, "secret": "s3cr3t", "customer": {"email": "e@x", "name": "n"}}
    return (f"k{seq}".encode(), json.dumps(value).encode(),
            [("kind", b"debug" if seq % 5 == 0 else b"info"), ("trace", f"t{seq}".encode())])


def expected_target(part: int, seq: int) -> tuple[bytes, dict, tuple]:
    return (f"k{seq}".encode(), {"seq": seq, "p": part, "customer": {"name": "n"}},
            (("kind", b"info"), ("x-trace", f"t{seq}".encode()), ("via", b"sparkmirror"),
             ("py", str(seq * 2).encode())))


def _count(bootstrap: str, topic: str) -> int:
    try:
        return sum(len(v) for v in read_topic(bootstrap, topic, timeout=20).values())
    except Exception:  # noqa: BLE001 - remote topic not there yet
        return 0


def _assert_kept_once_as_configured(target: dict, want: list[int], stamped: tuple = ()) -> None:
    """Every kept record once per partition, in order, changed as configured (`stamped`: headers after the chain's)."""
    for part in range(PARTS):
        got = target[part]
        assert [json.loads(r.value)["seq"] for r in got] == want, f"partition {part}: not every kept record once"
        for r in got:
            key, value, headers = expected_target(part, json.loads(r.value)["seq"])
            assert (r.key, json.loads(r.value), tuple(r.headers or ())) == (key, value, (*headers, *stamped))


def _checkpoint_of(cfg, group: str):
    """The group's checkpoint of partition 0, as a checkpoint round emits it."""
    emitter = CheckpointEmitter(cfg, cfg.mirrors[0])
    try:
        cps = emitter.run_once(sync_offsets=False)
    finally:
        emitter.close()
    (cp,) = [c for c in cps[group] if c.partition == 0]
    return cp


@pytest.mark.parametrize("copy", [RECORDS_IN_CAMPAIGN, "batches"])
def test_transforms_exactly_once_through_crashes_translated_and_verified(kafka_a, kafka_b, topic, flowgroup, job,
                                                                         copy):
    src = topic(kafka_a, PARTS)
    remote = f"dr-{src}"  # routed
    cfg = flowgroup(src, delivery="exactly-once", epochSeconds=5, copy=copy,
                    mirror={"transforms": TRANSFORMS, "groups": "xf-.*", "emitCheckpoints": True})
    producer = NumberedProducer(kafka_a.bootstrap, src, rate=150.0, partitions=PARTS, record=source_record)
    producer.start()
    rng = random.Random(11)
    for i in range(2):
        jp = job(cfg)
        before = _count(kafka_b.bootstrap, remote)
        wait_for(lambda: _count(kafka_b.bootstrap, remote) > before or jp.proc.poll() is not None, 300,
                 f"copying after start {i + 1}")
        assert jp.proc.poll() is None, jp.log()[-3000:]
        time.sleep(rng.uniform(0.5, 3.0))
        jp.kill(signal.SIGKILL)
    sent = producer.stop()
    want = [s for s in range(sent) if kept(s)]
    assert sent > 100 and len(want) < sent * 0.7  # dropped records all along, around every crash
    jp = job(cfg)
    wait_for(lambda: _count(kafka_b.bootstrap, remote) >= len(want) * PARTS or jp.proc.poll() is not None, 300,
             "catch-up")
    assert jp.proc.poll() is None, jp.log()[-3000:]
    time.sleep(2)  # a duplicate would land after the count was reached
    assert jp.stop() == 0, jp.log()[-3000:]
    assert f"copying {copy})" in jp.log(), "the lanes did not take the path asked for"

    source, target = read_topic(kafka_a.bootstrap, src), read_topic(kafka_b.bootstrap, remote)
    _assert_kept_once_as_configured(target, want)
    assert all(len(source[part]) == sent for part in range(PARTS))

    # a group committed on dropped records lands on the next kept one (10, 11 dropped -> 12; 65, 66, 67 -> 68)
    group = unique_name("xf-group")
    src_offset = {json.loads(r.value)["seq"]: r.offset for r in source[0]}
    tgt_offset = {json.loads(r.value)["seq"]: r.offset for r in target[0]}
    for at in (10, 65, 15, 12):
        lands = next(s for s in range(at, sent) if kept(s))
        commit_group(kafka_a.bootstrap, group, {(src, 0): src_offset[at]})
        cp = _checkpoint_of(cfg, group)
        assert (cp.topic, cp.upstream_offset, cp.downstream_offset) == (remote, src_offset[at], tgt_offset[lands]), at

    # verify: every committed range compared with the same transforms applied to the source side
    ranges = committed_ranges([cfg])
    assert ranges
    rows = [check_range(r.as_dict(), cfg.cluster("a").client_config(), cfg.cluster("b").client_config(), False,
                        cfg.mirrors[0].transforms) for r in ranges]
    assert all(row["status"] == "equal" for row in rows), [r for r in rows if r["status"] != "equal"][:2]
    assert sum(row["targetCount"] for row in rows) == len(want) * PARTS


@pytest.mark.parametrize("delivery,policy", [("at-least-once", "default"), ("exactly-once", "identity")])
def test_transforms_at_least_once_and_under_the_identity_policy(kafka_a, kafka_b, topic, flowgroup, job, delivery,
                                                                 policy):
    """The same chain on the two other paths a transformed record can take: at-least-once lanes (idempotent, no
    transaction) on batches, and the identity policy, whose provenance header makes every record go through the
    record path (`copyFallback` identity_policy), stamped after the transforms. Kept records once, in order, as
    configured; the provenance header last, naming the source; a group committed on a dropped record lands on
    the next kept one."""
    src = topic(kafka_a, PARTS)
    identity = policy == "identity"
    chain = [*TRANSFORMS[:-1], {"type": "route", "topics": r"(.*)" if identity else r"a\.(.*)",
                                "replacement": "dr-$1"}]
    remote = f"dr-{src}"
    cfg = flowgroup(src, delivery=delivery, epochSeconds=3,
                    mirror={"transforms": chain, "groups": "xf-.*", "replicationPolicy": policy})
    producer = NumberedProducer(kafka_a.bootstrap, src, rate=150.0, partitions=PARTS, record=source_record)
    producer.start()
    jp = job(cfg)
    wait_for(lambda: _count(kafka_b.bootstrap, remote) > 0 or jp.proc.poll() is not None, 300, "copying")
    time.sleep(3)
    sent = producer.stop()
    want = [s for s in range(sent) if kept(s)]
    wait_for(lambda: _count(kafka_b.bootstrap, remote) >= len(want) * PARTS or jp.proc.poll() is not None, 300,
             "catch-up")
    assert jp.proc.poll() is None, jp.log()[-3000:]
    time.sleep(2)  # a duplicate would land after the count was reached
    assert jp.stop() == 0, jp.log()[-3000:]
    path = "records" if identity else "batches"
    assert f"copying {path})" in jp.log(), "the lanes did not take the path expected"

    source, target = read_topic(kafka_a.bootstrap, src), read_topic(kafka_b.bootstrap, remote)
    _assert_kept_once_as_configured(target, want, ((PROVENANCE_HEADER, b"a"),) if identity else ())

    group = unique_name("xf-group")
    src_offset = {json.loads(r.value)["seq"]: r.offset for r in source[0]}
    tgt_offset = {json.loads(r.value)["seq"]: r.offset for r in target[0]}
    commit_group(kafka_a.bootstrap, group, {(src, 0): src_offset[10]})  # 10 and 11 dropped: lands on 12
    cp = _checkpoint_of(cfg, group)
    assert (cp.topic, cp.upstream_offset, cp.downstream_offset) == (remote, src_offset[10], tgt_offset[12])
