"""ACL sync round trip against real brokers with KRaft's StandardAuthorizer and SCRAM users on both sides: a user
allowed on source topics is allowed on their remote topics and nothing more, her group ACL goes across, a
binding the mirror created and the source removed goes on the target (also after a restart: what it created is
read back from its progress topic), hand-made ones stay; `sparkmirror plan` shows it first and changes nothing."""
from __future__ import annotations

import logging
import re
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

from sparkmirror.aclplan import binding_of
from sparkmirror.preview import observe, preview
from sparkmirror.progress import read_progress
from sparkmirror.resource.flowgroup import FlowGroupConfig
from sparkmirror.runner.dryrun import lines
from sparkmirror.topicsync import TopicSync
from sparkmirror_dev.kafka import KafkaCluster
from sparkmirror_dev.testing import create_topic, unique_name

from .conftest import wait_for

pytestmark = pytest.mark.kafka
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
Op = AclOperation
LISTENER = "SASL_PLAINTEXT"


def admin_conf(cluster: KafkaCluster) -> dict[str, str]:
    return {"bootstrap.servers": cluster.bootstrap}  # the PLAINTEXT door: a super user


def admin(cluster: KafkaCluster) -> AdminClient:
    return AdminClient(admin_conf(cluster))


def acls_of(cluster: KafkaCluster, principal: str) -> set[AclBinding]:
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, Op.ANY,
                           AclPermissionType.ANY)
    a = admin(cluster)
    return set(a.describe_acls(flt).result(timeout=30))


def create_acls(cluster: KafkaCluster, bindings: list[AclBinding]) -> None:
    a = admin(cluster)
    for fut in a.create_acls(bindings).values():
        fut.result(timeout=30)


def delete_acls(cluster: KafkaCluster, bindings: list[AclBinding]) -> None:
    a = admin(cluster)
    flts = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                             b.permission_type) for b in bindings]
    for fut in a.delete_acls(flts).values():
        fut.result(timeout=30)


def scram_user(cluster: KafkaCluster, user: str, password: str) -> None:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    a = admin(cluster)
    for fut in a.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, info, password.encode())]).values():
        fut.result(timeout=30)


def sasl(cluster: KafkaCluster, user: str, password: str) -> dict[str, str]:
    return {"bootstrap.servers": cluster.bootstrap_of(LISTENER), "security.protocol": LISTENER,
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password}


def consume(conf: dict[str, str], topic: str, group: str, want: int, timeout: float = 20.0) -> tuple[int, str | None]:
    """(records read, the first error's name): stops at `want` records or an authorization error."""
    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got, deadline = 0, time.monotonic() + timeout
        while got < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() in (KafkaError._PARTITION_EOF,):
                    continue
                return got, m.error().name()
            got += 1
        return got, None
    finally:
        c.close()


def produce(conf: dict[str, str], topic: str) -> str | None:
    """The delivery error's name of one record, or None when it was written."""
    errors: list[str | None] = []
    p = Producer({**conf, "message.timeout.ms": 10000})
    p.produce(topic, b"v", on_delivery=lambda err, _msg: errors.append(err.name() if err else None))
    p.flush(15)
    return errors[0] if errors else "NO_ANSWER"


def commit(cluster: KafkaCluster, group: str, topic: str) -> None:
    """A committed offset, so the group exists; a topic just created may not be known to the coordinator yet."""
    a = admin(cluster)

    def done() -> bool:
        res = a.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])])
        return all(tp.error is None for tp in res[group].result(timeout=30).topic_partitions)

    wait_for(done, 30, f"an offset of group {group} committed")


def fill(cluster: KafkaCluster, topic: str, n: int = 3) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(n):
        p.produce(topic, str(i).encode())
    p.flush(30)


def config(source: KafkaCluster, target: KafkaCluster, prefix: str, tmp_path) -> FlowGroupConfig:
    def entry(alias: str, cluster: KafkaCluster) -> dict:
        pw = tmp_path / f"{alias}.password"
        pw.write_text(cluster.security.scram_users["mirror"])
        return {"alias": alias, "bootstrapServers": cluster.bootstrap_of(LISTENER),
                "authentication": {"type": "scram-sha-512", "username": "mirror", "password": {"file": str(pw)}}}

    return FlowGroupConfig.model_validate({
        "name": unique_name("acl"), "clusters": [entry("src", source), entry("dst", target)],
        "progressTopic": unique_name("progress"),
        "mirrors": [{"name": "src-to-dst", "source": "src", "target": "dst", "topics": re.escape(prefix) + "-.*",
                     "groups": re.escape(prefix) + "-.*", "syncTopicAclsIntervalSeconds": 0.01,
                     "emitHeartbeats": False}]})


def test_acl_round_trip_between_secured_clusters(secured_kafka, secured_kafka_2, tmp_path, caplog, figure) -> None:
    """alice may read (and write) `T` and read topics under a prefix on the source; after one sync she reads
    their remote topics on the target with her own SCRAM login, but cannot write them nor read anything else;
    her group ACL went across; a source binding removed goes on the next sync, a hand-made WRITE stays. carol's
    READ on the remote topic, made by hand before the first sync (and equal to what the source grants her), is
    not the mirror's: it stays after the source revokes everything, while everything the mirror created goes."""
    caplog.set_level(logging.INFO, logger="sparkmirror.aclsync")
    started = time.monotonic()
    src, dst = secured_kafka, secured_kafka_2
    p = unique_name("acl")
    alice, password = f"User:{p}-alice", f"{p}-pw"
    carol = f"User:{p}-carol"
    topic, under, other = f"{p}-t", f"{p}-pfx-1", f"{p}-other"
    group = f"{p}-group"
    for t in (topic, under, other):
        create_topic(src.bootstrap, t, 1)
    create_topic(dst.bootstrap, topic, 1)            # the target's own topic of the same name: not mapped
    commit(src, group, topic)                        # the group exists on the source: it is checkpointed
    user = alice.removeprefix("User:")
    scram_user(dst, user, password)

    def binding(name, op=Op.READ, pattern=LITERAL, rtype=TOPIC, perm=ALLOW, principal=alice):
        return AclBinding(rtype, name, pattern, principal, "*", op, perm)

    source_acls = [binding(topic), binding(topic, Op.WRITE), binding(f"{p}-pfx-", pattern=PREFIXED),
                   binding(group, rtype=GROUP), binding(topic, principal=carol)]
    hand_made = binding(f"src.{topic}", Op.WRITE, principal=f"User:{p}-ops")
    carol_reads = binding(f"src.{topic}", principal=carol)  # a DR consumer's grant, made by hand on the target
    create_acls(src, source_acls)
    create_acls(dst, [hand_made, carol_reads])
    cfg = config(src, dst, p, tmp_path)

    def recorded() -> set[AclBinding]:
        """The bindings the mirror's ACL record in its progress topic says it created."""
        state = read_progress(admin_conf(dst), cfg.progressTopic, source_partitions=[], resource=cfg.resource)
        return {binding_of(r) for r in state.acls[(cfg.resource, "src-to-dst")]["bindings"]}

    mine = {binding(f"src.{topic}"), binding(f"src.{p}-pfx-", pattern=PREFIXED), binding(group, rtype=GROUP)}
    try:
        # the dry run lists what the sync will do, and does nothing
        before = acls_of(dst, alice)
        (obs,) = observe([cfg], timeout=15)
        (mirror,) = preview([obs]).as_dict()["flowGroups"][0]["mirrors"]
        acl_view = mirror["acls"]
        assert acl_view["status"] == "ok", acl_view
        planned = {(b["resourceType"], b["patternType"], b["name"], b["operation"]) for b in acl_view["create"]
                   if b["principal"] == alice}
        assert planned == {("TOPIC", "LITERAL", f"src.{topic}", "READ"), ("TOPIC", "PREFIXED", f"src.{p}-pfx-", "READ"),
                           ("GROUP", "LITERAL", group, "READ")}
        assert any(s["principal"] == alice and s["operation"] == "WRITE" for s in acl_view["skipped"])
        assert not any(b["principal"] == carol for b in acl_view["create"]) and acl_view["delete"] == []
        text = "\n".join(lines(preview([obs]).as_dict()))
        assert f"create ALLOW READ {alice} from * on TOPIC LITERAL src.{topic}" in text, text
        assert acls_of(dst, alice) == before == set()
        dst_admin = admin(dst)
        assert f"src.{topic}" not in dst_admin.list_topics(timeout=10).topics

        # one sync: remote topics and ACLs
        sync = TopicSync(cfg, cfg.mirrors[0])
        sync.sync()
        assert sync.acls.last is not None and sync.acls.last.status == "ok", sync.acls.last
        assert acls_of(dst, alice) == mine
        assert recorded() == mine  # carol's was there already: not the mirror's
        for t in (f"src.{topic}", f"src.{under}", f"src.{other}"):
            fill(dst, t)          # what the copy would have written
        fill(dst, topic)
        as_alice = sasl(dst, user, password)
        wait_for(lambda: consume(as_alice, f"src.{topic}", group, 3, timeout=5) == (3, None), 20,
                 "alice reading the remote topic with her SCRAM login")
        assert consume(as_alice, f"src.{under}", group, 3) == (3, None)
        assert produce(as_alice, f"src.{topic}") == "TOPIC_AUTHORIZATION_FAILED"
        assert consume(as_alice, topic, group, 1)[1] == "TOPIC_AUTHORIZATION_FAILED"  # the target's own topic
        assert consume(as_alice, f"src.{other}", group, 1)[1] == "TOPIC_AUTHORIZATION_FAILED"  # no ACL at source
        assert consume(as_alice, f"src.{topic}", f"{p}-not-synced", 1)[1] == "GROUP_AUTHORIZATION_FAILED"

        # removed at the source: removed on the target at the next sync; the hand-made WRITE stays
        delete_acls(src, [binding(topic), binding(group, rtype=GROUP)])
        sync.sync()
        assert acls_of(dst, alice) == {binding(f"src.{p}-pfx-", pattern=PREFIXED)}
        assert hand_made in acls_of(dst, hand_made.principal)
        assert consume(as_alice, f"src.{topic}", group, 1)[1] in ("TOPIC_AUTHORIZATION_FAILED",
                                                                  "GROUP_AUTHORIZATION_FAILED")
        assert recorded() == {binding(f"src.{p}-pfx-", pattern=PREFIXED)}
        sync.close()

        # the source revokes everything; a mirror started again reads what it created from its progress topic:
        # plan lists alice's prefix only, the sync deletes it; carol's hand-made READ and the WRITE stay
        delete_acls(src, source_acls)
        (obs,) = observe([cfg], timeout=15)
        (mirror,) = preview([obs]).as_dict()["flowGroups"][0]["mirrors"]
        assert [(b["principal"], b["name"]) for b in mirror["acls"]["delete"]] == [(alice, f"src.{p}-pfx-")]
        restarted = TopicSync(cfg, cfg.mirrors[0])
        restarted.sync()
        assert restarted.acls.last is not None and restarted.acls.last.status == "ok", restarted.acls.last
        assert acls_of(dst, alice) == set() and recorded() == set()
        assert acls_of(dst, carol) == {carol_reads} and hand_made in acls_of(dst, hand_made.principal)
        restarted.close()
        assert "Traceback" not in caplog.text and "ACLs not synced" not in caplog.text, caplog.text
        assert f"ACL deleted on dst: ALLOW READ {alice} from * on TOPIC LITERAL src.{topic}" in caplog.text
        assert f"ACL deleted on dst: ALLOW READ {carol}" not in caplog.text
    finally:
        delete_acls(src, source_acls)
        delete_acls(dst, [hand_made, carol_reads])
    figure("acl_round_trip", f"ACL round trip: {time.monotonic() - started:.1f} s")


def test_a_target_without_authorizer_is_one_log_line_and_the_mirror_goes_on(secured_kafka, kafka_b, tmp_path,
                                                                          caplog, figure) -> None:
    """Kafka 4 brokers without an authorizer list no ACLs and refuse to create one (SECURITY_DISABLED): the sync
    says so once, topics are still synced, nothing is raised."""
    caplog.set_level(logging.INFO, logger="sparkmirror.aclsync")
    started = time.monotonic()
    src = secured_kafka
    p = unique_name("noauth")
    create_topic(src.bootstrap, f"{p}-t", 1)
    reader = AclBinding(TOPIC, f"{p}-t", LITERAL, f"User:{p}-bob", "*", Op.READ, ALLOW)
    create_acls(src, [reader])
    pw = tmp_path / "mirror.password"
    pw.write_text(src.security.scram_users["mirror"])
    cfg = FlowGroupConfig.model_validate({
        "name": unique_name("noauth"), "progressTopic": unique_name("progress"),
        "clusters": [{"alias": "src", "bootstrapServers": src.bootstrap_of(LISTENER),
                      "authentication": {"type": "scram-sha-512", "username": "mirror", "password": {"file": str(pw)}}},
                     {"alias": "b", "bootstrapServers": kafka_b.bootstrap}],
        "mirrors": [{"name": "src-to-b", "source": "src", "target": "b", "topics": re.escape(p) + "-.*",
                     "syncTopicAclsIntervalSeconds": 0.01}]})
    sync = TopicSync(cfg, cfg.mirrors[0])
    try:
        for _ in range(3):
            routes = sync.sync()
            assert sync.acls.last is not None and sync.acls.last.status == "no-authorizer", sync.acls.last
    finally:
        sync.close()
        delete_acls(src, [reader])
    assert [r.target_topic for r in routes if p in r.target_topic] == [f"src.{p}-t"]  # heartbeats: always routed
    said = [r for r in caplog.records if r.name == "sparkmirror.aclsync"]
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("INFO", "mirror src-to-b: target cluster 'b' has no authorizer: no ACLs to sync")]
    figure("no_authorizer_sync", f"no authorizer on the target: {time.monotonic() - started:.1f} s")
