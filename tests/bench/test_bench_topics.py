"""The benchmarks' topic creation splits what one CreateTopics request asks for: a KRaft controller refuses a
request of over 10,000 metadata records ("Unable to perform excessively large batch operation"), which the scale
benchmark's 1,000 topics of 10 partitions (11,000 records) met."""
from __future__ import annotations

import types
from concurrent.futures import Future

import pytest


from bench import data
from sparkmirror.topicplan import MAX_RECORDS_PER_REQUEST


class _Admin:
    requests: list[list[tuple[str, int]]] = []
    made: dict[str, int] = {}

    def __init__(self, conf: dict) -> None:
        pass

    def create_topics(self, topics: list, operation_timeout: float) -> dict:
        self.requests.append([(t.topic, t.num_partitions) for t in topics])
        out = {}
        for t in topics:
            self.made[t.topic] = t.num_partitions
            out[t.topic] = f = Future()
            f.set_result(None)
        return out

    def list_topics(self, timeout: float) -> types.SimpleNamespace:
        return types.SimpleNamespace(topics={n: types.SimpleNamespace(partitions=dict.fromkeys(range(p)), error=None)
                                             for n, p in self.made.items()})


@pytest.mark.parametrize("topics, parts", [(1000, 10), (1, 1), (3, 4999), (7, 3000), (2500, 1)])
def test_every_topic_is_asked_for_once_within_the_limit(monkeypatch: pytest.MonkeyPatch, topics: int,
                                                        parts: int) -> None:
    _Admin.requests, _Admin.made = [], {}
    monkeypatch.setattr(data, "AdminClient", _Admin)
    specs = [(f"t{i}", parts) for i in range(topics)]
    data.create_topics("127.0.0.1:1", specs)
    asked = [s for r in _Admin.requests for s in r]
    assert asked == specs
    assert all(sum(p + 1 for _n, p in r) <= MAX_RECORDS_PER_REQUEST for r in _Admin.requests if len(r) > 1)
    assert all(r for r in _Admin.requests)
