"""Importing the legacy MirrorMaker's command line: clusters, pattern, parallelism, identity naming and the
start from its group, planned as the operator would; bad input named."""
from __future__ import annotations

import pytest

from sparkmirror.resource.documents import InputError
from sparkmirror.resource.legacy_import import import_legacy
from sparkmirror.resource.plan import plan

CONSUMER = """bootstrap.servers=old-a:9092
group.id=legacy-mm
security.protocol=SASL_SSL
sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required password="hunter2";
"""
PRODUCER = "bootstrap.servers=new-b:9092\nacks=all\n"
ARGV = ["--consumer.config", "c.properties", "--producer.config", "p.properties", "--whitelist", "orders.*",
        "--num.streams", "4"]


def test_command_line_becomes_a_resource_starting_from_the_group() -> None:
    out = import_legacy(ARGV, CONSUMER, PRODUCER, name="from-legacy")
    (res,) = out.resources
    spec = res["spec"]
    assert res["metadata"]["name"] == "from-legacy"
    assert spec["target"]["bootstrapServers"] == "new-b:9092"
    (m,) = spec["mirrors"]
    assert (m["source"]["bootstrapServers"], m["topicsPattern"], m["startFrom"]) == ("old-a:9092", "orders.*",
                                                                                     "legacy-mm")
    assert spec["spark"]["parallelism"] == 4
    assert "hunter2" not in str(out.resources)  # a credential is never inlined
    assert any("sasl.jaas.config" in n and "Secret" in n for n in out.notes)
    p = plan(res)
    assert p.errors == []
    (mirror,) = [m for g in p.groups for m in g.mirrors]
    assert (mirror.replicationPolicy.value, mirror.startFrom, mirror.topics) == ("identity", "legacy-mm",
                                                                                 "orders.*")


def test_tuning_keys_reach_the_lanes_clients_and_owned_ones_are_said() -> None:
    consumer = CONSUMER + "fetch.min.bytes=65536\nauto.offset.reset=earliest\nmax.poll.records=500\n"
    producer = PRODUCER + "compression.type=zstd\nbuffer.memory=33554432\nbatch.size=65536\n"
    out = import_legacy(ARGV, consumer, producer)
    (res,) = out.resources
    assert res["spec"]["mirrors"][0]["source"]["config"] == {"consumer.fetch.min.bytes": "65536"}
    assert res["spec"]["target"]["config"] == {"producer.compression.type": "zstd",
                                               "producer.buffer.memory": "33554432", "producer.batch.size": "65536"}
    said = "\n".join(out.notes)
    for key, why in (("acks", "the mirror owns acks"), ("auto.offset.reset", "the mirror owns auto.offset.reset"),
                     ("max.poll.records", "no equivalent")):
        assert f"{key}: not carried over: " in said and why in said, (key, said)
    p = plan(res)
    assert p.errors == [], p.errors
    (g,) = p.groups
    assert g.cluster("source").consumer == {"fetch.min.bytes": "65536"}
    assert g.cluster("target").producer == {"compression.type": "zstd", "queue.buffering.max.kbytes": "32768",
                                            "batch.size": "65536"}


def test_blacklist_and_include() -> None:
    argv = ["--consumer.config", "c", "--producer.config", "p", "--blacklist", "tmp\\..*"]
    (m,) = import_legacy(argv, CONSUMER, PRODUCER).resources[0]["spec"]["mirrors"]
    assert m["topicsExcludePattern"] == "tmp\\..*" and "topicsPattern" not in m
    argv = ["--consumer.config", "c", "--producer.config", "p", "--include", "a|b"]
    assert import_legacy(argv, CONSUMER, PRODUCER).resources[0]["spec"]["mirrors"][0]["topicsPattern"] == "a|b"


@pytest.mark.parametrize("argv, consumer, said", [
    (ARGV[:4] + ["--whitelist", "x", "--blacklist", "y"], CONSUMER, "not allowed with argument"),
    (ARGV[2:], CONSUMER, "--consumer.config"),
    (ARGV[:4], CONSUMER, "--whitelist"),
    (ARGV[:6] + ["--num.streams", "0"], CONSUMER, "--num.streams 0"),
    (ARGV, "group.id=g\n", "c.properties: no bootstrap.servers"),
])
def test_bad_input_is_named(argv: list[str], consumer: str, said: str) -> None:
    with pytest.raises(InputError) as e:
        import_legacy(argv, consumer, PRODUCER)
    assert said in str(e.value)


def test_cli_takes_the_legacy_flags(tmp_path) -> None:
    import subprocess
    import sys

    import yaml

    (tmp_path / "c.properties").write_text(CONSUMER)
    (tmp_path / "p.properties").write_text(PRODUCER)
    base = [sys.executable, "-m", "sparkmirror.cli", "import", "--consumer.config", "c.properties",
            "--producer.config", "p.properties"]
    ok = subprocess.run(base + ["--whitelist", "orders.*", "--num.streams", "3"], cwd=tmp_path,
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    res = yaml.safe_load(ok.stdout)
    assert (res["spec"]["mirrors"][0]["startFrom"], res["spec"]["spark"]["parallelism"]) == ("legacy-mm", 3)
    assert "hunter2" not in ok.stdout + ok.stderr
    bad = subprocess.run(base[:-1] + ["missing.properties", "--whitelist", "x"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert (bad.returncode, bad.stderr.strip()) == (2, "sparkmirror import: missing.properties: no such file")
