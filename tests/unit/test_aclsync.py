"""ACL sync's rule (`aclplan.plan_acl_sync`), pure: which source bindings go across and how, what is removed on
the target (only what the mirror created and owns), what is never touched; plus `AclSync`'s handling of clusters
without an authorizer or rights and of its ACL record, with an admin client that answers like the broker does."""
from __future__ import annotations

import logging
from concurrent.futures import Future

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

from sparkmirror.aclplan import AclScope, binding_of, binding_row, in_scope, plan_acl_sync
from sparkmirror.aclsync import AclSync
from sparkmirror.replication import DefaultReplicationPolicy, IdentityReplicationPolicy, TopicFilter
from sparkmirror.topicplan import select_topics

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
Op = AclOperation
ALICE = "User:alice"


def acl(name: str, op: AclOperation = Op.READ, perm: AclPermissionType = ALLOW, pattern=LITERAL, rtype=TOPIC,
        principal: str = ALICE, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def scope(topics: list[str], policy=None, groups=(), target_topics=(), topics_rx: str = ".*",
          own=("User:*",)) -> AclScope:
    """The scope of a mirror `a` -> `b` over source `topics`, routes chosen as TopicSync chooses them."""
    policy = policy or DefaultReplicationPolicy()
    chosen = select_topics(policy, TopicFilter(topics_rx, r".*[\-\.]internal|__.*"), topics, "b")
    return AclScope("a", policy, {t: policy.format_remote_topic("a", t) for t in chosen}, frozenset(groups),
                    frozenset(target_topics), frozenset(own))


def converged(source: list[AclBinding], target: list[AclBinding], sc: AclScope,
              owned=frozenset()) -> tuple[set[AclBinding], frozenset[AclBinding]]:
    """Apply a plan to the target, then check a second look finds nothing to do; (target, owned) after it."""
    plan = plan_acl_sync(source, target, sc, owned)
    after, mine = (set(target) | set(plan.create)) - set(plan.delete), plan.owned_after()
    again = plan_acl_sync(source, after, sc, mine)
    assert (again.create, again.delete) == ([], []), again
    assert again.owned_after() == mine
    return after, mine


def test_literal_read_goes_to_the_remote_name_and_write_never() -> None:
    sc = scope(["orders", "payments"])
    plan = plan_acl_sync([acl("orders"), acl("orders", Op.WRITE), acl("orders", Op.DESCRIBE_CONFIGS),
                          acl("orders", Op.CREATE), acl("orders", Op.ALTER_CONFIGS), acl("orders", Op.DELETE),
                          acl("orders", Op.ALTER), acl("orders", Op.IDEMPOTENT_WRITE)], [], sc)
    assert plan.create == sorted([acl("a.orders"), acl("a.orders", Op.DESCRIBE_CONFIGS)])
    assert plan.delete == []
    assert {b.operation for b, _ in plan.skipped} == {Op.WRITE, Op.CREATE, Op.ALTER_CONFIGS, Op.DELETE, Op.ALTER,
                                                     Op.IDEMPOTENT_WRITE}
    assert all("never copied" in why for _, why in plan.skipped)


def test_allow_all_becomes_read_and_describe_host_and_principal_kept() -> None:
    plan = plan_acl_sync([acl("orders", Op.ALL, principal="User:bob", host="10.0.0.1")], [], scope(["orders"]))
    assert plan.create == sorted([acl("a.orders", Op.READ, principal="User:bob", host="10.0.0.1"),
                                  acl("a.orders", Op.DESCRIBE, principal="User:bob", host="10.0.0.1")])


def test_prefixed_maps_through_the_policy() -> None:
    source = [acl("ord", pattern=PREFIXED), acl("zzz", pattern=PREFIXED)]  # zzz covers no replicated topic
    default = plan_acl_sync(source, [], scope(["orders", "ordinals"]))
    assert default.create == [acl("a.ord", pattern=PREFIXED)] and default.skipped == []
    dashed = DefaultReplicationPolicy("_")
    assert plan_acl_sync(source, [], scope(["orders"], dashed)).create == [acl("a_ord", pattern=PREFIXED)]
    identity = plan_acl_sync(source, [], scope(["orders"], IdentityReplicationPolicy()))
    assert identity.create == [acl("ord", pattern=PREFIXED)]
    literal = plan_acl_sync([acl("orders")], [], scope(["orders"], IdentityReplicationPolicy()))
    assert literal.create == [acl("orders")]


def test_a_prefix_that_would_cover_more_on_the_target_becomes_literals() -> None:
    """Under identity the target's own `orders-local` would be readable through `ord*`; under the default policy
    `a.c*` would cover the mirror's checkpoints topic: both become literals on the remote topics."""
    ident = scope(["orders", "ordinals"], IdentityReplicationPolicy(), target_topics=["orders", "orders-local"])
    plan = plan_acl_sync([acl("ord", pattern=PREFIXED)], [], ident)
    assert plan.create == sorted([acl("ordinals"), acl("orders")])
    default = scope(["cats", "orders"], target_topics=["a.cats", "a.checkpoints.internal", "a.gone"])
    assert plan_acl_sync([acl("c", pattern=PREFIXED)], [], default).create == [acl("a.cats")]
    # a remote topic whose source topic is gone is still the mirror's: the prefix stays a prefix
    assert plan_acl_sync([acl("o", pattern=PREFIXED)], [], default).create == [acl("a.o", pattern=PREFIXED)]


def test_topics_not_replicated_are_ignored_and_loops_are_not_mapped_back() -> None:
    """`b.orders` came from the target b: its ACLs stay on the source, as the topic does (never `a.b.orders`)."""
    sc = scope(["orders", "b.orders", "secret", "__consumer_offsets", "x.internal"], topics_rx="orders|b\\..*|x.*")
    source = [acl("b.orders"), acl("b.", pattern=PREFIXED), acl("secret"), acl("__consumer_offsets"),
              acl("x.internal"), acl("nothing-here"), acl("orders", rtype=ResourceType.TRANSACTIONAL_ID),
              acl("kafka-cluster", Op.ALTER, rtype=ResourceType.BROKER)]
    plan = plan_acl_sync(source, [], sc)
    assert (plan.create, plan.delete, plan.skipped) == ([], [], [])
    assert sc.remote == {"orders": "a.orders"}


def test_denies_are_kept_write_side_denies_are_not() -> None:
    sc = scope(["orders"])
    source = [acl("orders", Op.READ, DENY), acl("orders", Op.ALL, DENY, principal="User:eve"),
              acl("orders", Op.WRITE, DENY)]
    plan = plan_acl_sync(source, [], sc)
    assert plan.create == sorted([acl("a.orders", Op.READ, DENY), acl("a.orders", Op.ALL, DENY, principal="User:eve")])
    assert [(b.operation, b.permission_type) for b, _ in plan.skipped] == [(Op.WRITE, DENY)]


def test_a_deny_that_cannot_be_copied_keeps_the_allows_it_overrides_from_being_copied() -> None:
    """Wildcard denies and denies on `User:*` or the mirror's own user are not copied (they would deny on every
    topic of the target, or stop the mirror itself); the allows they override on the source stay behind too."""
    sc = scope(["orders", "public"], own=("User:*", "User:mirror"))
    source = [acl("orders"), acl("public", principal="User:*"), acl("orders", principal="User:bob"),
              acl("*", Op.READ, DENY),                                        # alice may read nothing
              acl("orders", Op.DESCRIBE, DENY, principal="User:*", host="10.0.0.9"),  # nobody from 10.0.0.9
              acl("orders", Op.WRITE, DENY, principal="User:mirror"),          # write-side: no effect on reads
              acl("public", Op.READ, DENY, principal="User:mirror")]
    plan = plan_acl_sync(source, [], sc)
    # alice's READ on orders: denied by the wildcard; User:*'s READ on public: alice is in User:*; bob's READ on
    # orders: READ implies DESCRIBE, which nobody may do from 10.0.0.9
    assert plan.create == []
    reasons = {(b.name, b.principal, b.operation): why for b, why in plan.skipped}
    assert "overridden on the source by DENY READ User:alice from * on TOPIC LITERAL *" in \
        reasons[("orders", ALICE, Op.READ)]
    assert "overridden" in reasons[("orders", "User:bob", Op.READ)]
    assert "wildcard" in reasons[("*", ALICE, Op.READ)]
    assert "mirror's own" in reasons[("public", "User:mirror", Op.READ)]
    # another host, another user: nothing overrides them
    other = plan_acl_sync([acl("orders", principal="User:carol", host="10.0.0.2"),
                           acl("orders", Op.DESCRIBE, DENY, principal="User:*", host="10.0.0.9")], [], sc)
    assert other.create == [acl("a.orders", principal="User:carol", host="10.0.0.2")]


def test_wildcard_allows_are_not_copied() -> None:
    plan = plan_acl_sync([acl("*"), acl("*", rtype=GROUP)], [], scope(["orders"], groups=["g1"]))
    assert plan.create == [] and len(plan.skipped) == 2
    assert all("wildcard" in why for _, why in plan.skipped)


def test_group_acls_of_checkpointed_groups_keep_their_names() -> None:
    sc = scope(["orders"], groups=["app-1", "app-2"])
    source = [acl("app-1", rtype=GROUP), acl("app-", Op.DESCRIBE, pattern=PREFIXED, rtype=GROUP),
              acl("app-2", Op.ALL, rtype=GROUP), acl("app-1", Op.DELETE, rtype=GROUP),
              acl("other", rtype=GROUP), acl("zz-", pattern=PREFIXED, rtype=GROUP)]
    plan = plan_acl_sync(source, [], sc)
    assert plan.create == sorted([acl("app-1", rtype=GROUP), acl("app-", Op.DESCRIBE, pattern=PREFIXED, rtype=GROUP),
                                  acl("app-2", Op.READ, rtype=GROUP), acl("app-2", Op.DESCRIBE, rtype=GROUP)])
    assert [(b.name, b.operation) for b, _ in plan.skipped] == [("app-1", Op.DELETE)]


def test_removals_take_only_what_the_mirror_created_and_still_governs() -> None:
    sc = scope(["orders", "pay"], groups=["app"], target_topics=["a.orders", "a.pay", "local", "heartbeats"])
    target = [
        acl("a.orders"),                                   # copied once, gone from the source: removed
        acl("a.pay", Op.DESCRIBE, DENY),                   # a deny copied once: removed too
        acl("a.p", pattern=PREFIXED),                      # a prefix that maps back onto `p*`: removed
        acl("app", rtype=GROUP),                           # group ACL no longer on the source: removed
        acl("a.orders", Op.WRITE, principal="User:ops"),   # hand-made write right on a remote topic: stays
        acl("a.orders", Op.ALL, principal="User:ops"),     # ALL is never copied, so never owned: stays
        acl("a.orders", Op.READ, DENY, principal="User:*"),  # a deny for everybody is never copied: stays
        acl("local"),                                      # the target's own topic: stays
        acl("a.", pattern=PREFIXED),                       # `a.` maps back onto no prefix: stays
        acl("*"),                                          # wildcards: stay
        acl("other-group", rtype=GROUP),                   # not a checkpointed group: stays
        acl("a.gone"),                                     # a remote topic no longer replicated: left as it is
    ]
    # the mirror's record lists everything (as if it had made them all): only what it governs goes
    plan = plan_acl_sync([acl("pay")], target, sc, set(target))
    assert plan.create == [acl("a.pay")]
    assert plan.delete == sorted([acl("a.orders"), acl("a.pay", Op.DESCRIBE, DENY), acl("a.p", pattern=PREFIXED),
                                  acl("app", rtype=GROUP)])
    assert plan.owned_after() == (set(target) - set(plan.delete)) | {acl("a.pay")}
    converged([acl("pay")], target, sc, set(target))
    # the same target, nothing recorded: nothing was the mirror's, nothing goes
    assert plan_acl_sync([acl("pay")], target, sc).delete == []


def test_identity_removal_leaves_prefixes_shared_with_the_targets_own_topics() -> None:
    sc = scope(["orders"], IdentityReplicationPolicy(), target_topics=["orders", "ord-local", "x"])
    target = [acl("orders"), acl("ord", pattern=PREFIXED), acl("orders", pattern=PREFIXED), acl("x")]
    plan = plan_acl_sync([], target, sc, set(target))
    # `ord*` also covers the target's ord-local: it cannot be the sync's, so it stays; `orders*` is the sync's
    assert plan.delete == sorted([acl("orders"), acl("orders", pattern=PREFIXED)])
    assert not in_scope(acl("ord", pattern=PREFIXED), sc) and not in_scope(acl("x"), sc)


def test_the_round_trip_converges_from_any_target_state() -> None:
    sc = scope(["orders", "ordinals", "pay"], groups=["g"], target_topics=["a.orders", "t-own"])
    source = [acl("ord", pattern=PREFIXED), acl("pay", Op.ALL), acl("pay", Op.READ, DENY, principal="User:eve"),
              acl("g", rtype=GROUP), acl("pay", Op.WRITE)]
    old = acl("a.orders", principal="User:old")  # the mirror created it once; the source no longer implies it
    after, mine = converged(source, [old, acl("t-own")], sc, {old})
    assert acl("t-own") in after and old not in after and old not in mine
    assert not any(b.operation == Op.WRITE for b in after)
    assert mine == after - {acl("t-own")}  # everything else there the mirror created


def test_a_hand_made_read_on_a_remote_topic_stays_when_the_source_revokes_the_same_binding() -> None:
    """A DR consumer's READ made by hand on the remote topic, equal to what the source implies: the mirror does
    not create it (it is there), does not adopt it, and does not delete it once the source revokes it."""
    sc = scope(["orders"])
    hand = acl("a.orders", principal="User:carol")
    plan = plan_acl_sync([acl("orders", principal="User:carol")], [hand], sc)
    assert (plan.create, plan.delete, plan.owned_after()) == ([], [], frozenset())
    revoked = plan_acl_sync([], [hand], sc, plan.owned_after())
    assert revoked.delete == [] and revoked.owned_after() == frozenset()


def test_an_owned_binding_goes_when_the_source_revokes_it() -> None:
    sc = scope(["orders"])
    first = plan_acl_sync([acl("orders")], [], sc)
    assert first.create == [acl("a.orders")] and first.owned_after() == {acl("a.orders")}
    revoked = plan_acl_sync([], [acl("a.orders")], sc, first.owned_after())
    assert revoked.delete == [acl("a.orders")] and revoked.owned_after() == frozenset()


def test_an_owned_binding_deleted_by_hand_is_created_again_while_the_source_implies_it() -> None:
    sc = scope(["orders"])
    again = plan_acl_sync([acl("orders")], [], sc, {acl("a.orders")})
    assert again.create == [acl("a.orders")] and again.owned_after() == {acl("a.orders")}
    # once the source no longer implies it, it is forgotten (nothing to delete): a hand-made one later stays
    gone = plan_acl_sync([], [], sc, {acl("a.orders")})
    assert (gone.delete, gone.owned_after()) == ([], frozenset())
    assert plan_acl_sync([], [acl("a.orders")], sc, gone.owned_after()).delete == []


def test_a_pre_existing_binding_equal_to_an_implied_one_is_not_adopted() -> None:
    """Made by hand before the mirror would have created it: left out of `create`, so never owned, even while
    the mirror owns other bindings on the same topic."""
    sc = scope(["orders"])
    hand = acl("a.orders", principal="User:carol")
    plan = plan_acl_sync([acl("orders"), acl("orders", principal="User:carol")], [hand], sc)
    assert plan.create == [acl("a.orders")] and plan.owned_after() == {acl("a.orders")}
    after = plan_acl_sync([], [hand, acl("a.orders")], sc, plan.owned_after())
    assert after.delete == [acl("a.orders")] and after.owned_after() == frozenset()


def test_a_plan_partly_applied_owns_what_was_done() -> None:
    sc = scope(["orders", "pay"])
    plan = plan_acl_sync([acl("orders")], [acl("a.pay")], sc, {acl("a.pay")})
    assert plan.create == [acl("a.orders")] and plan.delete == [acl("a.pay")]
    assert plan.owned_after(created=[], deleted=[]) == {acl("a.pay")}  # both failed: still on the target, still ours


def test_record_rows_round_trip() -> None:
    b = acl("a.", Op.DESCRIBE, DENY, PREFIXED, GROUP, "User:x", "10.0.0.1")
    assert binding_row(b) == ["GROUP", "a.", "PREFIXED", "User:x", "10.0.0.1", "DESCRIBE", "DENY"]
    assert binding_of(binding_row(b)) == b


# ------------------------------------------------------------------------------------------------ AclSync I/O

def _done(value=None, error: int | None = None) -> Future:
    f: Future = Future()
    if error is None:
        f.set_result(value)
    else:
        f.set_exception(KafkaException(KafkaError(error, "broker says no")))
    return f


class FakeAdmin:
    """Answers describe/create/delete like confluent-kafka's AdminClient: per-request futures."""

    def __init__(self, bindings=(), describe_error: int | None = None, alter_error: int | None = None,
                 groups=()) -> None:
        self.bindings, self.describe_error, self.alter_error = set(bindings), describe_error, alter_error
        self.groups = list(groups)
        self.created: list[AclBinding] = []
        self.deleted: list[AclBinding] = []

    def describe_acls(self, flt, request_timeout=None) -> Future:
        return _done(sorted(self.bindings), self.describe_error)

    def create_acls(self, acls, request_timeout=None) -> dict:
        if self.alter_error is None:
            self.bindings |= set(acls)
            self.created += acls
        return {b: _done(None, self.alter_error) for b in acls}

    def delete_acls(self, filters, request_timeout=None) -> dict:
        out = {}
        for f in filters:  # exact filters, as AclSync makes them
            gone = [b for b in self.bindings if (b.restype, b.name, b.resource_pattern_type, b.principal, b.host,
                                                 b.operation, b.permission_type) ==
                    (f.restype, f.name, f.resource_pattern_type, f.principal, f.host, f.operation, f.permission_type)]
            if self.alter_error is None:
                self.bindings -= set(gone)
                self.deleted += gone
            out[f] = _done(gone, self.alter_error)
        return out

    def list_consumer_groups(self, request_timeout=None) -> Future:
        class Group:
            def __init__(self, group_id: str) -> None:
                self.group_id = group_id

        class Res:
            valid = [Group(g) for g in self.groups]
            errors: list = []
        return _done(Res())


class FakeRecord:
    """The mirror's ACL record, as `AclRecord` reads and writes it; `fail` makes writing fail."""

    def __init__(self, owned=(), fail: bool = False) -> None:
        self.owned, self.fail = frozenset(owned), fail
        self.reads = 0
        self.writes: list[frozenset[AclBinding]] = []

    def where(self) -> str:
        return "progress topic 'p' on target 'b'"

    def read(self, target_topics) -> frozenset[AclBinding]:
        self.reads += 1
        return self.owned

    def write(self, bindings) -> None:
        if self.fail:
            raise RuntimeError("broker says no")
        self.owned = frozenset(bindings)
        self.writes.append(self.owned)


def make_sync(source: FakeAdmin, target: FakeAdmin, record: FakeRecord | None = None) -> AclSync:
    admins = {"source": source, "target": target}
    return AclSync("a", "a", "b", DefaultReplicationPolicy(), admins.__getitem__, lambda g: True, ["User:mirror"],
                   record=record or FakeRecord())


def test_no_authorizer_is_one_log_line_and_nothing_else(caplog) -> None:
    sync = make_sync(FakeAdmin(describe_error=KafkaError.SECURITY_DISABLED), FakeAdmin())
    with caplog.at_level(logging.INFO, logger="sparkmirror.aclsync"):
        for _ in range(3):
            state = sync.sync({"orders": "a.orders"}, [])
    assert state.status == "no-authorizer" and "source cluster 'a' has no authorizer" in state.message
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "Traceback" not in caplog.text


def test_a_target_that_refuses_acl_changes_is_one_warning_per_change(caplog) -> None:
    source = FakeAdmin([acl("orders")])
    target = FakeAdmin(alter_error=KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    sync = make_sync(source, target)
    with caplog.at_level(logging.INFO, logger="sparkmirror.aclsync"):
        assert sync.sync({"orders": "a.orders"}, []).status == "refused"
        assert sync.sync({"orders": "a.orders"}, []).status == "refused"
        target.alter_error = None
        assert sync.sync({"orders": "a.orders"}, []).status == "ok"
        assert sync.sync({"orders": "a.orders"}, []).status == "ok"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "needs ALTER on the cluster" in warnings[0] and "copy goes on" in warnings[0]
    assert target.created == [acl("a.orders")]
    assert any("works again" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("error", [KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError._TRANSPORT])
def test_unreadable_acls_never_raise(error, caplog) -> None:
    sync = make_sync(FakeAdmin(), FakeAdmin(describe_error=error))
    state = sync.sync({"orders": "a.orders"}, [])
    assert state.status in ("refused", "unavailable") and state.plan is None
    assert "target cluster 'b'" in state.message


def test_a_group_binding_goes_when_the_source_has_no_group_binding_left() -> None:
    source = FakeAdmin([acl("orders")], groups=["app"])
    target = FakeAdmin([acl("app", rtype=GROUP), acl("a.orders")])
    record = FakeRecord([acl("app", rtype=GROUP), acl("a.orders")])
    state = make_sync(source, target, record).sync({"orders": "a.orders"}, [])
    assert state.status == "ok" and target.deleted == [acl("app", rtype=GROUP)]
    assert target.bindings == {acl("a.orders")} and record.owned == {acl("a.orders")}


def test_the_record_is_read_once_and_written_only_when_what_the_mirror_owns_changed() -> None:
    hand = acl("a.orders", principal="User:carol")
    source, target, record = FakeAdmin([acl("orders")]), FakeAdmin([hand]), FakeRecord()
    sync = make_sync(source, target, record)
    for _ in range(3):
        assert sync.sync({"orders": "a.orders"}, []).status == "ok"
    assert record.reads == 1 and record.writes == [{acl("a.orders")}]
    source.bindings = set()  # the source revokes everything: the mirror's binding goes, carol's stays
    assert sync.sync({"orders": "a.orders"}, []).status == "ok"
    assert target.bindings == {hand} and record.writes[-1] == frozenset()


def test_a_record_that_cannot_be_written_is_written_at_the_next_sync(caplog) -> None:
    source, target, record = FakeAdmin([acl("orders")]), FakeAdmin(), FakeRecord(fail=True)
    sync = make_sync(source, target, record)
    with caplog.at_level(logging.INFO, logger="sparkmirror.aclsync"):
        state = sync.sync({"orders": "a.orders"}, [])
    assert state.status == "unavailable" and "cannot record the ACLs this mirror created" in state.message
    assert target.bindings == {acl("a.orders")} and sync.owned == {acl("a.orders")}
    record.fail = False
    assert sync.sync({"orders": "a.orders"}, []).status == "ok"  # nothing to change on the target, still written
    assert record.writes == [{acl("a.orders")}]


def test_an_unreadable_record_removes_nothing() -> None:
    class Unreadable(FakeRecord):
        def read(self, target_topics):
            raise TimeoutError("no answer")

    target = FakeAdmin([acl("a.orders")])
    state = make_sync(FakeAdmin(), target, Unreadable()).sync({"orders": "a.orders"}, [])
    assert state.status == "unavailable" and "reading the ACLs this mirror created" in state.message
    assert target.deleted == [] and state.plan is None
