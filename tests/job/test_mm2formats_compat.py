"""MM2 heartbeat and checkpoint records: known byte vectors, and the real connect-mirror-client jar both ways."""
from __future__ import annotations

import pytest

from sparkmirror.mm2formats import Checkpoint, FormatError, Heartbeat

from .mm2java import run_java  # noqa: F401  (fixture)


def test_heartbeat_bytes() -> None:
    hb = Heartbeat("A", "bb", 0x0102030405060708)
    assert hb.key() == b"\x00\x01A\x00\x02bb"
    assert hb.value() == b"\x00\x00" + bytes([1, 2, 3, 4, 5, 6, 7, 8])
    assert Heartbeat.decode(hb.key(), hb.value()) == hb


def test_checkpoint_bytes() -> None:
    cp = Checkpoint("g", "A.t", 7, 100, 42, "meta")
    assert cp.key() == b"\x00\x01g\x00\x03A.t\x00\x00\x00\x07"
    assert cp.value() == (b"\x00\x00" + (100).to_bytes(8, "big") + (42).to_bytes(8, "big") + b"\x00\x04meta")
    assert Checkpoint.decode(cp.key(), cp.value()) == cp
    empty = Checkpoint("g", "t", 0, 0, 0)
    assert empty.value().endswith(b"\x00\x00") and len(empty.value()) == 2 + 8 + 8 + 2


def test_utf8_and_limits() -> None:
    cp = Checkpoint("grüppe", "tópic", 1, 1, 1, "ä")
    assert cp.key().startswith(b"\x00\x07gr\xc3\xbcppe")
    assert Checkpoint.decode(cp.key(), cp.value()) == cp
    with pytest.raises(ValueError, match="32767"):
        Checkpoint("g" * 40000, "t", 0, 0, 0).key()


def test_bad_input() -> None:
    with pytest.raises(FormatError, match="unsupported version 1"):
        Heartbeat.decode(Heartbeat("a", "b", 1).key(), b"\x00\x01" + bytes(8))
    with pytest.raises(FormatError, match="truncated"):
        Checkpoint.decode(b"\x00\x05ab", Checkpoint("a", "b", 0, 0, 0).value())


JAVA = r"""
package org.apache.kafka.connect.mirror;

import java.io.*;
import java.util.*;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;

public class FormatProbe {
    static byte[] hex(String s) { return HexFormat.of().parseHex(s); }
    static String hex(byte[] b) { return HexFormat.of().formatHex(b); }
    static ConsumerRecord<byte[], byte[]> rec(String k, String v) { return new ConsumerRecord<>("t", 0, 0L, hex(k), hex(v)); }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, "UTF-8"));
        String line;
        while ((line = in.readLine()) != null) {
            String[] f = line.split("\t", -1);
            switch (f[0]) {
                case "decode-heartbeat": {
                    Heartbeat h = Heartbeat.deserializeRecord(rec(f[1], f[2]));
                    System.out.println(h.sourceClusterAlias() + "\t" + h.targetClusterAlias() + "\t" + h.timestamp());
                    break;
                }
                case "decode-checkpoint": {
                    Checkpoint c = Checkpoint.deserializeRecord(rec(f[1], f[2]));
                    System.out.println(c.consumerGroupId() + "\t" + c.topicPartition().topic() + "\t" + c.topicPartition().partition()
                        + "\t" + c.upstreamOffset() + "\t" + c.downstreamOffset() + "\t" + c.metadata());
                    break;
                }
                case "encode-heartbeat": {
                    Heartbeat h = new Heartbeat(f[1], f[2], Long.parseLong(f[3]));
                    System.out.println(hex(h.recordKey()) + "\t" + hex(h.recordValue()));
                    break;
                }
                case "encode-checkpoint": {
                    Checkpoint c = new Checkpoint(f[1], new TopicPartition(f[2], Integer.parseInt(f[3])),
                        Long.parseLong(f[4]), Long.parseLong(f[5]), f[6]);
                    System.out.println(hex(c.recordKey()) + "\t" + hex(c.recordValue()));
                    break;
                }
                default: throw new IllegalArgumentException(f[0]);
            }
        }
    }
}
"""

HEARTBEATS = [Heartbeat("A", "B", 1_700_000_000_123), Heartbeat("us-west-1", "eu", 0),
              Heartbeat("ä-cluster", "b", -1), Heartbeat("", "x", 2**63 - 1)]
CHECKPOINTS = [Checkpoint("g1", "A.orders", 0, 10, 7, ""), Checkpoint("grüppe", "t", 2**31 - 1, 2**40, 2**40 - 5, "m"),
               Checkpoint("g", "B.A.x", 3, 0, 0, "some metadata")]


def test_real_mm2_decodes_what_we_encode(run_java) -> None:
    lines = [f"decode-heartbeat\t{h.key().hex()}\t{h.value().hex()}" for h in HEARTBEATS]
    lines += [f"decode-checkpoint\t{c.key().hex()}\t{c.value().hex()}" for c in CHECKPOINTS]
    out = run_java("org.apache.kafka.connect.mirror.FormatProbe", JAVA, stdin="\n".join(lines) + "\n").splitlines()
    want = [f"{h.source_cluster_alias}\t{h.target_cluster_alias}\t{h.timestamp}" for h in HEARTBEATS]
    want += [f"{c.group}\t{c.topic}\t{c.partition}\t{c.upstream_offset}\t{c.downstream_offset}\t{c.metadata}"
             for c in CHECKPOINTS]
    assert out == want


def test_we_decode_what_real_mm2_encodes(run_java) -> None:
    lines = [f"encode-heartbeat\t{h.source_cluster_alias}\t{h.target_cluster_alias}\t{h.timestamp}" for h in HEARTBEATS]
    lines += [f"encode-checkpoint\t{c.group}\t{c.topic}\t{c.partition}\t{c.upstream_offset}\t{c.downstream_offset}\t"
              f"{c.metadata}" for c in CHECKPOINTS]
    out = run_java("org.apache.kafka.connect.mirror.FormatProbe", JAVA, stdin="\n".join(lines) + "\n").splitlines()
    assert len(out) == len(HEARTBEATS) + len(CHECKPOINTS)
    for obj, line in zip([*HEARTBEATS, *CHECKPOINTS], out):
        key, value = (bytes.fromhex(x) for x in line.split("\t"))
        assert (key, value) == (obj.key(), obj.value())  # byte for byte
        assert type(obj).decode(key, value) == obj
