"""The client settings a plan took, asked of librdkafka itself before anything runs: a name it does not know or
a value it refuses is a validation error naming the resource field, not a lane that fails at its start.

Shared by the operator (reconcile: before applying) and the local runner (`run`, `run --check`, `plan`): it
imports confluent-kafka and nothing of the Spark side. Each setting is set on a client that has no
bootstrap.servers, so nothing connects; librdkafka validates names and values when the client is made.
"""
from __future__ import annotations

import logging
import re

from confluent_kafka import Consumer, KafkaException, Producer

from .resource.clientconf import ClientKey
from .resource.planresult import Plan, Problem

_IGNORED = re.compile(r"is a (consumer|producer) property and will be ignored by this (consumer|producer) instance")


class _Heard(logging.Handler):
    """librdkafka's log lines of one check, kept rather than printed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def refusal(key: ClientKey) -> str | None:
    """librdkafka's words when it refuses `key` for its client (or would ignore it there), or None."""
    heard = _Heard()
    log = logging.getLogger(f"sparkmirror.clientcheck.{id(heard)}")
    log.propagate, log.handlers = False, [heard]
    log.setLevel(logging.DEBUG)
    try:
        if key.client == "consumer":
            c = Consumer({"group.id": "sparkmirror-check", key.name: key.value}, logger=log)
            c.poll(0)
            c.close()
        else:
            Producer({key.name: key.value}, logger=log).flush(0)
    except (KafkaException, ValueError, TypeError) as e:
        err = e.args[0] if e.args else e
        return f"librdkafka refuses {key.name}={key.value!r}: {getattr(err, 'str', lambda: str(err))()}"
    finally:
        logging.Logger.manager.loggerDict.pop(log.name, None)
    if key.client in ("consumer", "producer"):
        for line in heard.lines:
            if (m := _IGNORED.search(line)) is not None:
                return f"{key.name} is a {m.group(1)} setting: the lanes' {key.client}s would ignore it"
    return None


def check_client_keys(p: Plan) -> list[Problem]:
    """The plan's client settings librdkafka refuses, each naming its field; also added to `p.errors`."""
    problems = [Problem(k.field, why) for k in p.client_keys if (why := refusal(k)) is not None]
    p.errors += problems
    return problems
