"""MM2's client settings planned: Java names mapped to librdkafka's, each prefix to the client that uses it,
the settings the mirror owns refused naming the key and why, librdkafka-less keys refused, and per-client keys
refused on the batch path. Pure: the plan, no broker."""
from __future__ import annotations

import pytest

from sparkmirror.resource.clientconf import BATCH_FETCH_KEYS, BATCHES_WHY, client_setting, connector_prefix
from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.resource.plan import plan
from sparkmirror.resource.refusedkeys import cluster_config_refusals, connector_config_refusals


def resource(target_config: dict | None = None, source_config: dict | None = None,
             connector: dict | None = None, **spec_over) -> dict:
    spec = {"version": "1.0",
            "target": {"alias": "b", "bootstrapServers": "127.0.0.1:9093", "config": target_config or {}},
            "mirrors": [{"source": {"alias": "a", "bootstrapServers": "127.0.0.1:9092",
                                    "config": source_config or {}},
                         "topicsPattern": "orders.*", "sourceConnector": {"config": connector or {}}}],
            **spec_over}
    return {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
            "metadata": {"name": "m", "namespace": "ns"}, "spec": spec}


def one_group(res: dict) -> FlowGroupConfig:
    p = plan(res)
    assert p.errors == [], p.errors
    (g,) = p.groups
    return g


@pytest.mark.parametrize("java, value, name, want", [
    ("receive.buffer.bytes", "65536", "socket.receive.buffer.bytes", "65536"),
    ("send.buffer.bytes", "131072", "socket.send.buffer.bytes", "131072"),
    ("fetch.max.wait.ms", "200", "fetch.wait.max.ms", "200"),
    ("buffer.memory", "33554432", "queue.buffering.max.kbytes", "32768"),
    ("buffer.memory", "1025", "queue.buffering.max.kbytes", "2"),  # rounded up, never below what was asked
    ("compression.zstd.level", "9", "compression.level", "9"),
    ("compression.type", "zstd", "compression.type", "zstd"),  # the same name in both: unchanged
    ("fetch.min.bytes", "1048576", "fetch.min.bytes", "1048576"),
])
def test_java_names_become_librdkafka_names(java: str, value: str, name: str, want: str) -> None:
    s = client_setting("producer" if "compression" in java or java == "buffer.memory" else "consumer", java, value)
    assert (s.name, s.value, s.refused) == (name, want, "")


def test_prefixes_reach_the_clients_that_use_them() -> None:
    g = one_group(resource(
        source_config={"consumer.fetch.min.bytes": "1000", "receive.buffer.bytes": "65536",
                       "admin.metadata.max.age.ms": "60000"},
        target_config={"producer.compression.type": "lz4", "producer.batch.size": "65536"},
        connector={"source.consumer.fetch.max.wait.ms": "200", "target.producer.compression.type": "zstd",
                   "producer.override.buffer.memory": "33554432", "target.admin.socket.timeout.ms": "20000"}))
    a, b = g.cluster("a"), g.cluster("b")
    (m,) = g.mirrors
    assert a.consumer == {"fetch.min.bytes": "1000"}
    assert a.config == {"socket.receive.buffer.bytes": "65536", "metadata.max.age.ms": "60000"}
    assert b.producer == {"compression.type": "lz4", "batch.size": "65536"}
    assert b.config == {"socket.timeout.ms": "20000"}  # an admin key is a connection setting of its cluster
    assert m.sourceConsumer == {"fetch.wait.max.ms": "200"}
    assert m.targetProducer == {"compression.type": "zstd", "queue.buffering.max.kbytes": "32768"}
    # a lane's clients: the cluster's settings, its client keys, then the mirror's (MM2's order: later wins)
    assert g.producer_config(m)["compression.type"] == "zstd"
    assert g.producer_config(m)["batch.size"] == "65536"
    consumer = g.consumer_config(m)
    assert (consumer["fetch.min.bytes"], consumer["fetch.wait.max.ms"],
            consumer["socket.receive.buffer.bytes"]) == ("1000", "200", "65536")
    assert "compression.type" not in consumer and "fetch.min.bytes" not in g.producer_config(m)


@pytest.mark.parametrize("where, key, value, said", [
    ("connector", "source.consumer.isolation.level", "read_uncommitted", "the mirror owns isolation.level: "
                                                                         "read_committed"),
    ("connector", "consumer.enable.auto.commit", "true", "the mirror owns enable.auto.commit: positions"),
    ("connector", "source.consumer.group.id", "g", "the mirror owns group.id"),
    ("connector", "consumer.auto.offset.reset", "latest", "the mirror owns auto.offset.reset: a position"),
    ("connector", "target.producer.transactional.id", "t", "the mirror owns transactional.id: one per lane"),
    ("connector", "producer.override.enable.idempotence", "false", "the mirror owns enable.idempotence: "
                                                                   "transactions need"),
    ("connector", "producer.override.acks", "1", "the mirror owns acks"),
    ("connector", "target.producer.partitioner.class", "x.P", "keeps its source partition"),
    ("connector", "producer.value.serializer", "x.S", "copied as bytes"),
    ("connector", "target.producer.delivery.timeout.ms", "1000", "transaction timeout"),
    ("connector", "target.producer.linger.ms", "5", "spec.spark.lingerMs"),
    ("connector", "target.producer.max.in.flight.requests.per.connection", "10", "at most 5"),
    ("connector", "source.consumer.max.poll.records", "10", "librdkafka has no equivalent of Java's "
                                                            "max.poll.records"),
    ("connector", "producer.override.max.block.ms", "10", "no equivalent of Java's max.block.ms"),
    ("connector", "producer.override.interceptor.classes", "x.I", "Java classes"),
    ("connector", "target.producer.buffer.memory", "lots", "expected a number of bytes"),
    ("connector", "source.consumer.sasl.jaas.config", "x", "set through tls/authentication"),
    ("source", "consumer.isolation.level", "read_uncommitted", "the mirror owns isolation.level"),
    ("source", "isolation.level", "read_uncommitted", "the mirror owns isolation.level"),  # every client's
    ("target", "producer.transactional.id", "t", "the mirror owns transactional.id"),
    ("target", "acks", "1", "the mirror owns acks"),
    ("target", "admin.client.id", "x", None),  # not owned: every client of the cluster takes it
])
def test_owned_and_impossible_keys_are_refused_by_name(where: str, key: str, value: str, said: str | None
                                                       ) -> None:
    res = resource(**{"connector" if where == "connector" else f"{where}_config": {key: value}})
    p = plan(res)
    field = {"connector": "spec.mirrors[0].sourceConnector", "source": "spec.mirrors[0].source",
             "target": "spec.target"}[where] + f".config[{key}]"
    if said is None:
        assert p.errors == []
        return
    assert [e.field for e in p.errors] == [field], p.errors
    assert said in p.errors[0].message, p.errors[0].message
    assert p.groups == []


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_the_keys_the_crd_refuses_are_the_plans_refusals(delivery: str) -> None:
    """The CRD's CEL rules (refusedkeys.py, tests/operator/test_crd.py on the API server) never refuse what the
    plan takes: every key listed is refused by the plan at that very field, for both deliveries, with the reason
    the rule's message gives; the clusters' Connect worker group.id stays not applicable."""
    cluster, connector = cluster_config_refusals(), connector_config_refusals()
    assert {"transactional.id", "producer.acks", "consumer.isolation.level", "consumer.group.id",
            "enable.auto.commit"} <= set(cluster) and "group.id" not in cluster
    assert {"producer.override.transactional.id", "target.producer.acks", "source.consumer.isolation.level",
            "source.consumer.group.id", "consumer.override.enable.auto.commit"} <= set(connector)
    places = {"target": "spec.target", "source": "spec.mirrors[0].source",
              "sourceConnector": "spec.mirrors[0].sourceConnector",
              "checkpointConnector": "spec.mirrors[0].checkpointConnector"}
    for where, field in places.items():
        for key, why in (connector if where.endswith("Connector") else cluster).items():
            res = resource(delivery=delivery)
            mirror = res["spec"]["mirrors"][0]
            holder = {"target": res["spec"]["target"], "source": mirror["source"],
                      "sourceConnector": mirror["sourceConnector"],
                      "checkpointConnector": mirror.setdefault("checkpointConnector", {})}[where]
            holder["config"] = {key: "x"}
            assert [(e.field, e.message) for e in plan(res).errors] == [(f"{field}.config[{key}]", why)], (where, key)


def test_idempotence_is_the_users_under_at_least_once() -> None:
    g = one_group(resource(connector={"producer.override.enable.idempotence": "false"}, delivery="at-least-once"))
    assert g.mirrors[0].targetProducer == {"enable.idempotence": "false"}
    assert client_setting("producer", "enable.idempotence", "false", exactly_once=True).refused


def test_group_membership_keys_are_listed_not_applicable() -> None:
    p = plan(resource(connector={"source.consumer.session.timeout.ms": "10000"},
                      source_config={"consumer.max.poll.interval.ms": "1"}))
    assert p.errors == []
    assert {"spec.mirrors[0].sourceConnector.config[source.consumer.session.timeout.ms]: lanes join no consumer "
            "group", "spec.mirrors[0].source.config[consumer.max.poll.interval.ms]: lanes join no consumer "
            "group"} <= set(p.not_applicable)
    assert p.groups[0].mirrors[0].sourceConsumer == {}


def test_conflicting_values_for_one_client_are_refused() -> None:
    p = plan(resource(connector={"target.producer.compression.type": "zstd", "producer.override.compression.type":
                                 "lz4"}))
    assert len(p.errors) == 1 and "conflicts with" in p.errors[0].message, p.errors
    assert "compression.type" in p.errors[0].field


def test_per_client_keys_are_refused_on_the_batch_path() -> None:
    res = resource(connector={"target.producer.compression.type": "zstd"},
                   target_config={"producer.batch.size": "1000", "socket.timeout.ms": "20000"},
                   source_config={"consumer.fetch.min.bytes": "1"}, copy="batches")
    p = plan(res)
    assert sorted(e.field for e in p.errors) == [
        "spec.mirrors[0].source.config[consumer.fetch.min.bytes]",
        "spec.mirrors[0].sourceConnector.config[target.producer.compression.type]",
        "spec.target.config[producer.batch.size]"]
    assert all("copy: batches forwards the source's record batches as bytes" in e.message for e in p.errors)
    # the target's compression asked without a client prefix is refused there too: batches keep the source's
    p = plan(resource(target_config={"compression.type": "zstd"}, copy="batches"))
    assert [(e.field, e.message) for e in p.errors] == [("spec.target.config[compression.type]", BATCHES_WHY)]
    # connection settings of the cluster are every client's, the batch path's too
    res = resource(target_config={"socket.timeout.ms": "20000"}, copy="batches")
    assert one_group(res).cluster("b").config == {"socket.timeout.ms": "20000"}
    # the Fetch keys size and time the batch path's Fetch: taken, whatever the prefix or name (Java's or not)
    res = resource(connector={"source.consumer.fetch.max.wait.ms": "200", "consumer.override.fetch.max.bytes": "4096"},
                   source_config={"consumer.max.partition.fetch.bytes": "1024"}, copy="batches")
    assert plan(res).errors == []
    g = one_group(res)
    assert {k: g.consumer_config(g.mirrors[0])[k] for k in BATCH_FETCH_KEYS} == {
        "fetch.wait.max.ms": "200", "fetch.max.bytes": "4096", "max.partition.fetch.bytes": "1024"}


def test_connector_prefixes_longest_first() -> None:
    assert connector_prefix("source.cluster.consumer.fetch.min.bytes") == ("source", "consumer", "fetch.min.bytes")
    assert connector_prefix("producer.override.linger.ms") == ("target", "producer", "linger.ms")
    assert connector_prefix("consumer.poll.timeout.ms") == ("source", "consumer", "poll.timeout.ms")
    assert connector_prefix("topics") is None


def test_a_refusal_reaches_the_status_as_invalid_spec() -> None:
    from sparkmirror_operator.status import build_status

    res = resource(connector={"source.consumer.isolation.level": "read_uncommitted"})
    st = build_status(name="m", generation=2, plan=plan(res), apps={}, lags=None, problems=[], old=None, now="T")
    ready = next(c for c in st["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert ready["message"].startswith("spec.mirrors[0].sourceConnector.config[source.consumer.isolation.level]: "
                                       "the mirror owns isolation.level: read_committed")


def test_the_cli_refuses_an_owned_key_in_one_line(tmp_path) -> None:
    import subprocess
    import sys

    import yaml

    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump(resource(target_config={"producer.transactional.id": "mine"})))
    out = subprocess.run([sys.executable, "-m", "sparkmirror.cli", "run", "--check", "-f", str(f)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr
    assert "spec.target.config[producer.transactional.id]: the mirror owns transactional.id" in out.stderr, \
        out.stderr
    f.write_text(yaml.safe_dump(resource(connector={"source.consumer.fetch.min.bytez": "1"})))
    out = subprocess.run([sys.executable, "-m", "sparkmirror.cli", "run", "--check", "-f", str(f)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out
    assert ('spec.mirrors[0].sourceConnector.config[source.consumer.fetch.min.bytez]: librdkafka refuses '
            "fetch.min.bytez='1': No such configuration property") in out.stderr, out.stderr


def test_the_batch_path_takes_the_clusters_connection_settings() -> None:
    from sparkmirror.copying.errors import CopyError
    from sparkmirror.copying.wiretalk import wire_talk
    from sparkmirror.wire.settings import WireSettingError, wire_config

    conf = one_group(resource(target_config={"socket.timeout.ms": "20000", "reconnect.backoff.max.ms": "2000",
                                             "connections.max.idle.ms": "60000", "metadata.max.age.ms": "30000",
                                             "socket.connection.setup.timeout.ms": "5000"},
                              copy="batches")).cluster("b").client_config()
    assert wire_config(conf) == {"bootstrap_servers": "127.0.0.1:9093", "request_timeout_ms": 20000,
                                 "reconnect_backoff_max_ms": 2000, "connections_max_idle_ms": 60000,
                                 "metadata_max_age_ms": 30000, "socket_connection_setup_timeout_ms": 5000}
    with pytest.raises(WireSettingError, match="client setting socket.timeout.ms='soon': expected a number"):
        wire_config({"socket.timeout.ms": "soon"})
    # a lane opens its wire inside `wire_talk`: the setting stops the mirror as a CopyError naming it
    with pytest.raises(CopyError, match="client setting socket.timeout.ms='soon': expected a number"), \
            wire_talk("target", "b", "connecting"):
        wire_config({"socket.timeout.ms": "soon"})


@pytest.mark.parametrize("connector, said", [
    ({"source.consumer.fetch.min.bytez": "1"}, 'No such configuration property: "fetch.min.bytez"'),
    ({"target.producer.compression.type": "zsdt"}, 'Invalid value "zsdt"'),
    ({"producer.override.fetch.min.bytes": "1"}, "fetch.min.bytes is a consumer setting: the lanes' producers "
                                                 "would ignore it"),
    ({"source.consumer.compression.type": "zstd"}, "compression.type is a producer setting"),
])
def test_librdkafka_refuses_what_it_does_not_know(connector: dict, said: str) -> None:
    from sparkmirror.clientcheck import check_client_keys

    p = plan(resource(connector=connector))
    assert p.errors == []
    (problem,) = check_client_keys(p)
    (key,) = connector
    assert problem.field == f"spec.mirrors[0].sourceConnector.config[{key}]" and said in problem.message, problem
    assert p.errors == [problem]


def test_librdkafka_takes_the_mapped_names() -> None:
    from sparkmirror.clientcheck import check_client_keys

    p = plan(resource(source_config={"receive.buffer.bytes": "65536", "consumer.fetch.max.wait.ms": "200"},
                      target_config={"producer.buffer.memory": "33554432", "socket.timeout.ms": "20000"},
                      connector={"target.producer.compression.zstd.level": "9",
                                 "producer.override.compression.type": "zstd"}))
    assert len(p.client_keys) == 6 and check_client_keys(p) == [] and p.errors == []
