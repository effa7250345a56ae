"""Every MirrorMaker 2 topology carries data, on three real local clusters, counted record by record.

Active/passive, active/active (default naming, and identity naming where only the provenance header stops
loops), fan-in (two sources into one target), fan-out (one source, two targets) and a pipe A -> B -> C. Each
mirror runs as its lanes (`copy_lane`, the Spark task's body) in rounds, as the job would epoch after epoch;
every record carries its origin cluster, partition and sequence number, and every topic of every cluster is
read back: each origin's sequences complete, in order, exactly once, and nothing mirrored back to where it came
from.
"""
from __future__ import annotations

import pytest
from confluent_kafka import Producer

from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror_dev.testing import create_topic, read_topic, unique_name

from .conftest import mirror_once

pytestmark = [pytest.mark.kafka, pytest.mark.minutes(2.4)]

N = 60  # sequences per partition and origin
PARTS = 2


@pytest.fixture
def clusters(kafka) -> dict:
    """a, b and c: the shared session clusters, c started on first use."""
    return {n: kafka.cluster(n) for n in ("a", "b", "c")}


def _produce(cluster, topic: str, origin: str, start: int = 0, count: int = N) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for seq in range(start, start + count):
        for part in range(PARTS):
            p.produce(topic, value=f"{origin}:{part}:{seq}".encode(), partition=part)
    assert p.flush(30) == 0


def _mirror(clusters: dict, source: str, target: str, topics: str, policy: str = "default") -> FlowGroupConfig:
    return FlowGroupConfig.model_validate({
        "name": unique_name(f"{source}{target}"),
        "clusters": [{"alias": n, "bootstrapServers": c.bootstrap} for n, c in clusters.items()],
        "mirrors": [{"name": f"{source}-to-{target}", "source": source, "target": target, "topics": topics,
                     "replicationPolicy": policy, "emitCheckpoints": False, "emitHeartbeats": False}],
        "lanes": 2, "epochSeconds": 2, "commitIntervalMs": 100, "progressTopic": unique_name("progress")})


def _round(*configs: FlowGroupConfig) -> None:
    """One epoch of every lane of every mirror, in order (a pipe's second hop sees what the first copied)."""
    for cfg in configs:
        mirror_once(cfg, 2.0)


def _origins(cluster, topic: str) -> dict[str, dict[int, list[int]]]:
    """origin -> partition -> sequences, in the order the topic holds them."""
    out: dict[str, dict[int, list[int]]] = {}
    for part, recs in read_topic(cluster.bootstrap, topic).items():
        for r in recs:
            origin, p, seq = r.value.decode().split(":")
            assert int(p) == part, f"{topic}: a record of partition {p} landed in partition {part}"
            out.setdefault(origin, {}).setdefault(part, []).append(int(seq))
    return out


def _exactly(count: int = N, start: int = 0) -> dict[int, list[int]]:
    return {p: list(range(start, start + count)) for p in range(PARTS)}


def _topics(cluster) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(timeout=30).topics)


def test_active_passive_and_pipe(clusters) -> None:
    a, b, c = clusters["a"], clusters["b"], clusters["c"]
    t = unique_name("pipe")
    create_topic(a.bootstrap, t, PARTS)
    _produce(a, t, "a")
    ab, bc = _mirror(clusters, "a", "b", t), _mirror(clusters, "b", "c", f"a\\.{t}")
    _round(ab, bc)
    _produce(a, t, "a", N, N)  # more while it runs: the next epochs carry them through both hops
    _round(ab, bc)
    _round(ab, bc)
    assert _origins(b, f"a.{t}") == {"a": _exactly(2 * N)}
    assert _origins(c, f"b.a.{t}") == {"a": _exactly(2 * N)}
    assert f"b.a.{t}" not in _topics(a) and f"a.{t}" not in _topics(c)


@pytest.mark.parametrize("policy", ["default", "identity"])
def test_active_active_never_loops(clusters, policy: str) -> None:
    a, b = clusters["a"], clusters["b"]
    t = unique_name(f"aa-{policy}")
    for cl in (a, b):
        create_topic(cl.bootstrap, t, PARTS)
    _produce(a, t, "a")
    _produce(b, t, "b")
    # each side mirrors the other's topic; with default naming the remote topics (a.t, b.t) match too, so only
    # the policy's cycle check keeps them from going back
    pattern = f"(.*\\.)?{t}"
    ab, ba = _mirror(clusters, "a", "b", pattern, policy), _mirror(clusters, "b", "a", pattern, policy)
    for _ in range(3):
        _round(ab, ba)
    if policy == "default":
        assert _origins(a, t) == {"a": _exactly()} and _origins(b, t) == {"b": _exactly()}
        assert _origins(b, f"a.{t}") == {"a": _exactly()} and _origins(a, f"b.{t}") == {"b": _exactly()}
        assert not {f"a.b.{t}", f"b.a.{t}"} & (_topics(a) | _topics(b))
    else:  # one topic per side holding both origins, each exactly once: the provenance header stops the loop
        assert _origins(a, t) == {"a": _exactly(), "b": _exactly()}
        assert _origins(b, t) == {"a": _exactly(), "b": _exactly()}


def test_fan_in_and_fan_out(clusters) -> None:
    a, b, c = clusters["a"], clusters["b"], clusters["c"]
    t = unique_name("fan")
    for cl in (a, b):
        create_topic(cl.bootstrap, t, PARTS)
    _produce(a, t, "a")
    _produce(b, t, "b")
    ac, bc, ab = _mirror(clusters, "a", "c", t), _mirror(clusters, "b", "c", t), _mirror(clusters, "a", "b", t)
    for _ in range(2):
        _round(ac, bc, ab)
    # fan-in: both sources land on c, each in its own remote topic
    assert _origins(c, f"a.{t}") == {"a": _exactly()} and _origins(c, f"b.{t}") == {"b": _exactly()}
    # fan-out: a's topic went to b and to c, each copy complete
    assert _origins(b, f"a.{t}") == {"a": _exactly()}
    assert _origins(b, t) == {"b": _exactly()}  # b's own topic untouched by the mirror into b
