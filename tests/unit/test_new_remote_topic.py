"""A lane that starts right after the topic sync created its remote topics may find them unknown to the broker
it asks for a moment (the scale benchmark's mirror of 1,000 new topics of 10 partitions ended so): it asks again
for a bounded time, then names the topic."""
from __future__ import annotations

from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException

from sparkmirror.copying import start
from sparkmirror.copying.errors import CopyError


def _fake_admin(unknown_rounds: dict[str, int], asked: list[list[str]]) -> type:
    class Admin:
        def __init__(self, conf: dict) -> None:
            pass

        def describe_configs(self, resources: list) -> dict:
            asked.append([r.name for r in resources])
            out = {}
            for r in resources:
                f: Future = Future()
                if unknown_rounds.get(r.name, 0) > 0:
                    unknown_rounds[r.name] -= 1
                    f.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
                else:
                    f.set_result({"max.message.bytes": type("E", (), {"value": "1048588"})()})
                out[r] = f
            return out
    return Admin


def test_a_topic_the_broker_does_not_know_yet_is_asked_for_again(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[str]] = []
    monkeypatch.setattr(start, "kept_admin", _fake_admin({"b": 2}, asked))
    monkeypatch.setattr(start.time, "sleep", lambda s: None)
    assert start.target_max_message_bytes({}, {"a", "b"}) == {"a": 1048588, "b": 1048588}
    assert asked == [["a", "b"], ["b"], ["b"]]


def test_a_topic_that_stays_unknown_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start, "kept_admin", _fake_admin({"gone": 10**6}, []))
    monkeypatch.setattr(start.time, "sleep", lambda s: None)
    with pytest.raises(CopyError, match="target topic 'gone' cannot be described"):
        start.target_max_message_bytes({}, {"gone"}, unknown_for=0.05)


def test_no_topics_asks_nothing() -> None:
    assert start.target_max_message_bytes({"bootstrap.servers": "127.0.0.1:1"}, set()) == {}
