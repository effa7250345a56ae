"""MM2 replication policies: names, internal topics, cycles, provenance header; checked against the real jar."""
from __future__ import annotations

import pytest

from sparkmirror.resource.flowgroup import Mirror
from sparkmirror.replication import (PROVENANCE_HEADER, DefaultReplicationPolicy, IdentityReplicationPolicy,
                                RecordStamper, TopicFilter, policy_for, provenance, should_copy_record,
                                should_replicate_topic, stamp_provenance)

from .mm2java import run_java  # noqa: F401  (fixture)


def test_default_policy_names() -> None:
    p = DefaultReplicationPolicy()
    assert p.format_remote_topic("us-west", "orders") == "us-west.orders"
    assert p.topic_source("us-west.orders") == "us-west"
    assert p.topic_source("orders") is None
    assert p.upstream_topic("B.A.orders") == "A.orders"
    assert p.upstream_topic("orders") is None
    assert p.original_topic("B.A.orders") == "orders"
    assert p.original_topic("orders") == "orders"
    assert p.checkpoints_topic("A") == "A.checkpoints.internal"
    assert p.offset_syncs_topic("A") == "mm2-offset-syncs.A.internal"


def test_default_policy_custom_separator() -> None:
    p = DefaultReplicationPolicy("_")
    assert p.format_remote_topic("A", "x.y") == "A_x.y"
    assert p.topic_source("A_x.y") == "A"
    assert p.upstream_topic("B_A_x") == "A_x"
    assert p.original_topic("B_A_x.y") == "x.y"
    assert p.checkpoints_topic("A") == "A_checkpoints_internal"
    assert p.is_internal_topic("A_checkpoints_internal")


def test_internal_topics() -> None:
    p = DefaultReplicationPolicy()
    for t in ("__consumer_offsets", "__transaction_state", ".hidden", "mm2-offset-syncs.B.internal",
              "A.checkpoints.internal", "mm2-configs.A.internal"):
        assert p.is_internal_topic(t), t
    for t in ("orders", "A.orders", "heartbeats", "connect-offsets", "x.internal"):
        assert not p.is_internal_topic(t), t
    assert p.is_heartbeats_topic("heartbeats") and p.is_heartbeats_topic("A.B.heartbeats")
    assert not p.is_heartbeats_topic("A.orders")


def test_identity_policy() -> None:
    p = IdentityReplicationPolicy()
    assert p.format_remote_topic("A", "orders") == "orders"
    assert p.format_remote_topic("A", "heartbeats") == "A.heartbeats"
    assert p.topic_source("orders") is None
    assert p.topic_source("A.heartbeats") == "A"
    assert p.upstream_topic("A.orders") == "A.orders"
    assert p.original_topic("A.orders") == "A.orders"
    assert not p.is_cycle("orders", "A")
    assert IdentityReplicationPolicy(source_alias="A").topic_source("orders") == "A"


def test_policy_for_mirror() -> None:
    m = Mirror(name="m", source="A", target="B", replicationPolicy="identity")
    assert isinstance(policy_for(m), IdentityReplicationPolicy)
    m = Mirror(name="m", source="A", target="B", separator="-")
    p = policy_for(m)
    assert isinstance(p, DefaultReplicationPolicy) and p.format_remote_topic("A", "t") == "A-t"


def test_cycles_never_mirror_back() -> None:
    p = DefaultReplicationPolicy()
    f = TopicFilter(".*", Mirror.model_fields["topicsExclude"].default)
    # mirror A -> B
    assert should_replicate_topic(p, f, "orders", "B")
    assert not should_replicate_topic(p, f, "B.orders", "B")      # came from B
    assert not should_replicate_topic(p, f, "C.B.orders", "B")    # came from B through C
    assert should_replicate_topic(p, f, "C.orders", "B")          # came from C: multi-hop is fine
    assert should_replicate_topic(p, f, "heartbeats", "B")        # heartbeats travel (MM2)
    assert not should_replicate_topic(p, f, "B.heartbeats", "B")
    assert not should_replicate_topic(p, f, "B.checkpoints.internal", "B")
    assert not should_replicate_topic(p, f, "__consumer_offsets", "B")
    assert not should_replicate_topic(p, f, "sparkmirror.progress.internal", "B")
    never = TopicFilter(".*", None, frozenset({"progress"}))
    assert not should_replicate_topic(p, never, "progress", "B")
    only = TopicFilter("orders|payments", None)
    assert should_replicate_topic(p, only, "payments", "B")
    assert not should_replicate_topic(p, only, "orders2", "B")   # whole-name match, like Java matches()
    assert should_replicate_topic(p, only, "heartbeats", "B")    # heartbeats regardless of the filter


def test_invalid_regex_names_field() -> None:
    with pytest.raises(ValueError, match="topicsExclude: invalid regex"):
        TopicFilter(".*", "(")


def test_provenance_header_prevents_identity_loops() -> None:
    local = [("k", b"v")]
    assert should_copy_record(local, "B") and should_copy_record(None, "B")
    at_b = stamp_provenance(local, "A")                       # A -> B
    assert at_b == [("k", b"v"), (PROVENANCE_HEADER, b"A")]
    assert not should_copy_record(at_b, "A")                  # B -> A: it came from A, skip
    at_c = stamp_provenance(at_b, "B")                        # B -> C
    assert provenance(at_c) == ["A", "B"] and at_c[-1] == (PROVENANCE_HEADER, b"A,B")
    assert not should_copy_record(at_c, "A") and not should_copy_record(at_c, "B")
    assert should_copy_record(at_c, "D")
    s = RecordStamper.of(IdentityReplicationPolicy(), "B", "A")
    assert not s.should_copy(at_b) and s.should_copy(local)
    assert s.headers_for(None) == [(PROVENANCE_HEADER, b"B")]
    d = RecordStamper.of(DefaultReplicationPolicy(), "B", "A")
    assert d.should_copy(at_b) and d.headers_for(local) is local and d.headers_for(None) is None


JAVA = r"""
import java.io.*;
import java.util.*;
import org.apache.kafka.connect.mirror.*;

public class PolicyProbe {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", -1);
            DefaultReplicationPolicy p = f[0].equals("identity") ? new IdentityReplicationPolicy() : new DefaultReplicationPolicy();
            Map<String, Object> conf = new HashMap<>();
            conf.put("replication.policy.separator", f[1]);
            p.configure(conf);
            String t = f[2];
            System.out.println(String.join("\t", p.formatRemoteTopic("src", t), String.valueOf(p.topicSource(t)),
                String.valueOf(p.upstreamTopic(t)), p.originalTopic(t), String.valueOf(p.isInternalTopic(t)),
                String.valueOf(p.isHeartbeatsTopic(t)), String.valueOf(p.isCheckpointsTopic(t)),
                String.valueOf(p.isMM2InternalTopic(t)), p.checkpointsTopic(t)));
        }
    }
}
"""

TOPICS = ["orders", "A.orders", "B.A.orders", "A..orders", "A.", ".A", "a.b.c.d", "heartbeats", "A.heartbeats",
          "__consumer_offsets", "mm2-offset-syncs.B.internal", "A.checkpoints.internal", "x.internal",
          "mm2.internal", "A_orders", "B_A_x.y", "A_checkpoints_internal", "weird__name", "A.B", "A"]


def test_matches_real_mm2_policies(run_java) -> None:
    cases = [(kind, sep, t) for kind in ("default", "identity") for sep in (".", "_") for t in TOPICS]
    out = run_java("PolicyProbe", JAVA, stdin="".join(f"{k}\t{s}\t{t}\n" for k, s, t in cases)).splitlines()
    assert len(out) == len(cases)
    for (kind, sep, t), line in zip(cases, out):
        p = IdentityReplicationPolicy(sep) if kind == "identity" else DefaultReplicationPolicy(sep)
        mine = "\t".join([p.format_remote_topic("src", t), str(p.topic_source(t)).replace("None", "null"),
                          str(p.upstream_topic(t)).replace("None", "null"), p.original_topic(t),
                          str(p.is_internal_topic(t)).lower(), str(p.is_heartbeats_topic(t)).lower(),
                          str(p.is_checkpoints_topic(t)).lower(), str(p.is_mm2_internal_topic(t)).lower(),
                          p.checkpoints_topic(t)])
        assert mine == line, (kind, sep, t)
