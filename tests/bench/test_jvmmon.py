"""The soak's view of a real JVM: its RSS split at the heap's address range, NMT's categories, the live heap."""
from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

from bench.jvmmon import JvmMonitor

HOLDER = """
public class Holder {
    static byte[][] kept = new byte[64][];
    public static void main(String[] a) throws Exception {
        for (int i = 0; i < kept.length; i++) kept[i] = new byte[256 * 1024];
        System.out.println("ready");
        Thread.sleep(120_000);
    }
}
"""


@pytest.fixture
def jvm(tmp_path: Path):
    src = tmp_path / "Holder.java"
    src.write_text(HOLDER)
    p = subprocess.Popen(["java", "-Xmx256m", "-XX:NativeMemoryTracking=summary", str(src)],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield p.pid
    finally:
        p.kill()
        p.wait()


def test_a_sample_splits_rss_at_the_heap_and_a_histogram_counts_what_is_kept(jvm: int) -> None:
    mon = JvmMonitor(jvm)
    s = mon.sample()
    assert 0 < s.heap_rss < s.rss and s.nonheap_rss == s.rss - s.heap_rss
    assert s.heap_rss >= 16 * 1024 * 1024  # the 16 MiB it keeps were touched
    assert s.heap_used >= 16 * 1024 * 1024 and s.heap_committed <= 256 * 1024 * 1024
    assert {"Java Heap", "Code", "Class", "Thread", "Total"} <= set(s.nmt_kb) and s.metaspace_committed > 0
    live = mon.histogram()  # a full GC: the 64 arrays of 256 KiB survive it
    assert live.by_class["[B"][1] >= 16 * 1024 * 1024 and live.bytes >= live.by_class["[B"][1]
    assert live.t <= time.time()
