"""A producer setting passed through from MM2's keys takes effect on the target: `target.producer.compression.type
= zstd` in a resource's connector config, planned as the operator plans it, makes the lane's producer write zstd
batches, as Kafka's own DumpLogSegments reads them from the target broker's log; every record copied once."""
from __future__ import annotations

import re
import subprocess

from sparkmirror_dev import install, paths
from sparkmirror_dev.procs import java_cmd
from sparkmirror.resource.plan import plan
from .conftest import close_kept_lanes, mirror_once, numbered_sequences, produce_numbered, unique_name

PARTS = 2
RECORDS = 300


def batch_codecs(log_dir) -> list[str]:
    """The compression codec of every data batch (not the transaction markers) in a partition's log segments."""
    files = sorted(str(f) for f in log_dir.glob("*.log"))
    dump_log = install.tool_class(paths.KAFKA_VERSION, "DumpLogSegments")  # kafka-dump-log
    cmd = java_cmd(install.kafka(paths.KAFKA_VERSION), dump_log, "--files", ",".join(files), heap="256m", log4j=False)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return [m.group(2) for m in re.finditer(r"isControl: (\w+).*?compresscodec: (\w+)", out.stdout)
            if m.group(1) == "false"]


def test_target_producer_compression_reaches_the_target_batches(kafka_a, kafka_b, figure) -> None:
    src = unique_name("zsrc")
    from sparkmirror_dev.testing import create_topic

    create_topic(kafka_a.bootstrap, src, PARTS)
    produce_numbered(kafka_a.bootstrap, src, PARTS, 0, RECORDS)  # written uncompressed
    res = {"apiVersion": "sparkmirror.io/v1alpha1", "kind": "KafkaMirrorMaker2",
           "metadata": {"name": unique_name("cc"), "namespace": "local"},
           "spec": {"target": {"alias": "b", "bootstrapServers": kafka_b.bootstrap},
                    "progressTopic": unique_name("progress"),
                    "mirrors": [{"source": {"alias": "a", "bootstrapServers": kafka_a.bootstrap},
                                 "topicsPattern": src,
                                 "sourceConnector": {"config": {"target.producer.compression.type": "zstd",
                                                                "source.consumer.fetch.max.wait.ms": "100",
                                                                "emit.heartbeats.enabled": "false",
                                                                "emit.checkpoints.enabled": "false"}}}]}}
    p = plan(res)
    assert p.errors == [], p.errors
    (cfg,) = p.groups
    try:
        mirror_once(cfg)
    finally:
        close_kept_lanes()
    dst = f"a.{src}"
    seqs = numbered_sequences(kafka_b.bootstrap, dst)
    assert {part: s for part, s in seqs.items()} == {part: list(range(RECORDS)) for part in range(PARTS)}
    for part in range(PARTS):
        codecs = batch_codecs(kafka_b.home / "data" / f"{dst}-{part}")
        assert codecs and set(codecs) == {"zstd"}, (part, codecs)
        figure(f"zstd data batches on the target, partition {part}", len(codecs))
    # the source's own batches are uncompressed: the codec is the setting's, not carried over from the source
    assert set(batch_codecs(kafka_a.home / "data" / f"{src}-0")) == {"none"}
