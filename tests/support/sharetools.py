"""Kafka's own share-group tools (KIP-932) for the tests (not product): kafka-console-share-consumer and
kafka-share-groups as their main classes from the test ground's release, and kafka-configs for a group's configs
(`share.auto.offset.reset`, ...). Shared by the job's share-group tests and the operator's failover through the
resource, so both judge what was carried by what Kafka itself reads."""
from __future__ import annotations

import re
import subprocess

from confluent_kafka import Consumer, TopicPartition

from sparkmirror_dev import install, paths
from sparkmirror_dev.procs import java_cmd
from sparkmirror_dev.testing import unique_name

SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"  # kafka-console-share-consumer.sh
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"  # kafka-share-groups.sh
RECORD = re.compile(r"(\d+):(\d+)")  # what produce_numbered writes: <partition>:<sequence>
CONFIG = re.compile(r"([a-z][\w.]*)=(\S*) sensitive=")  # a kafka-configs --describe line: name=value sensitive=...


def kafka_tool(main: str, *args: str, timeout: float = 120) -> str:
    """One of Kafka's own tools of the test ground's release; its standard output without the log lines."""
    res = subprocess.run(java_cmd(install.kafka(paths.KAFKA_VERSION), main, *args, heap="256m"),
                         capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    return res.stdout


def set_group_configs(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """kafka-configs --alter on a group (dynamic group configs, ConfigResource GROUP)."""
    kafka_tool(install.tool_class(paths.KAFKA_VERSION, "ConfigCommand"), "--bootstrap-server", bootstrap, "--alter",
               "--entity-type", "groups", "--entity-name", group, "--add-config",
               ",".join(f"{k}={v}" for k, v in sorted(configs.items())))


def group_configs(bootstrap: str, group: str) -> dict[str, str]:
    """kafka-configs --describe of a group: the configs set on it (its dynamic configs; defaults not listed)."""
    out = kafka_tool(install.tool_class(paths.KAFKA_VERSION, "ConfigCommand"), "--bootstrap-server", bootstrap,
                     "--describe", "--entity-type", "groups", "--entity-name", group)
    return {m[1]: m[2] for line in out.splitlines() if (m := CONFIG.match(line.strip()))}


def start_earliest(bootstrap: str, group: str) -> None:
    """The group starts at the beginning where it has no state (kafka-configs, a group config)."""
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})


def share_consume(bootstrap: str, topic: str, group: str, max_messages: int | None = None) -> list[tuple[int, int]]:
    """kafka-console-share-consumer: (partition, sequence) of every record it printed (and so acknowledged)."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--group", group, "--timeout-ms", "12000"]
    if max_messages is not None:
        args += ["--max-messages", str(max_messages)]
    out = kafka_tool(SHARE_CONSUMER, *args, timeout=180)
    return [(int(m[1]), int(m[2])) for line in out.splitlines() if (m := RECORD.fullmatch(line.strip()))]


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_name("ends")})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
    finally:
        c.close()


def described(bootstrap: str, group: str) -> list[str]:
    """kafka-share-groups --describe --offsets: the table's rows of `group`."""
    out = kafka_tool(SHARE_GROUPS, "--bootstrap-server", bootstrap, "--describe", "--group", group, "--offsets")
    return [line for line in out.splitlines() if line.startswith(group + " ")]
