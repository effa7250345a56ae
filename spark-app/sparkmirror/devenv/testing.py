"""Helpers the tests (and the benchmark) share for giving each test its own topics and namespaces."""
from __future__ import annotations

import itertools
import os
import re
import uuid

from confluent_kafka.admin import AdminClient, NewTopic

_counter = itertools.count()


def unique_name(prefix: str) -> str:
    """A name no other test or run uses: prefix, pid-local counter and a random tail, Kafka- and k8s-safe."""
    prefix = re.sub(r"[^a-z0-9-]", "-", prefix.lower()).strip("-")[:30] or "t"
    return f"{prefix}-{os.getpid() % 10000}-{next(_counter)}-{uuid.uuid4().hex[:5]}"


def create_topic(bootstrap: str, name: str, partitions: int = 3, config: dict[str, str] | None = None,
                 timeout: float = 30.0) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                        config=config or {})], operation_timeout=timeout)[name]
    fut.result(timeout=timeout)
    return name
