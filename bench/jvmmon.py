"""What a JVM's resident memory is made of, sampled in a background thread: for the soak (bench/soak.py).

A JVM's RSS mixes two things of different kinds. The Java heap is one mapping reserved at start (`-Xmx`) whose
pages become resident as the collector first touches them and leave only when it uncommits regions: its RSS
climbs for hours toward the committed heap and is bounded by `-Xmx`, whatever the program does. The rest
(metaspace, code cache, thread stacks, GC structures, malloc of the JVM and of native libraries) has no such
bound. So a sample splits the process' RSS at the heap's address range (from `GC.heap_info`, read in
`/proc/<pid>/smaps`): `heap_rss` and `nonheap_rss`. What the program keeps on the heap is the heap used right
after a full collection: `GC.class_histogram` forces one and says by class what survived (`live`), taken every
`live_every` seconds (a pause of a few hundred ms on a heap of ~100 MB). With Native Memory Tracking on
(`-XX:NativeMemoryTracking=summary`), each sample also has the committed KB per NMT category.
"""
from __future__ import annotations

import re
import subprocess
import threading
import time
from dataclasses import dataclass, field

HEAP_RANGE = re.compile(r"heap\s+total (\d+)K, used (\d+)K \[0x([0-9a-f]+), 0x([0-9a-f]+)\)")
METASPACE = re.compile(r"Metaspace\s+used (\d+)K, committed (\d+)K")
NMT_CATEGORY = re.compile(r"^-\s+(.+?) \(reserved=\d+KB, committed=(\d+)KB\)", re.M)
NMT_TOTAL = re.compile(r"^Total: reserved=\d+KB, committed=(\d+)KB", re.M)
HISTO_ROW = re.compile(r"^\s*\d+:\s+(\d+)\s+(\d+)\s+(\S+)", re.M)
HISTO_TOTAL = re.compile(r"^Total\s+(\d+)\s+(\d+)", re.M)
TOP_CLASSES = 300


@dataclass
class JvmSample:
    t: float
    rss: int                  # bytes, whole process
    heap_rss: int             # bytes resident in the Java heap's mapping
    heap_committed: int       # bytes
    heap_used: int            # bytes (live and garbage not yet collected)
    metaspace_committed: int  # bytes
    nmt_kb: dict[str, int] = field(default_factory=dict)  # committed KB per NMT category ("Total" too); empty: off

    @property
    def nonheap_rss(self) -> int:
        return self.rss - self.heap_rss


@dataclass
class LiveHeap:
    t: float
    bytes: int                               # heap used after the full collection the histogram forced
    by_class: dict[str, tuple[int, int]]     # class -> (instances, bytes), the TOP_CLASSES biggest


@dataclass
class JvmMonitor:
    """Samples the JVM `pid` every `interval` s; a live-heap histogram every `live_every` s (0: never)."""

    pid: int
    interval: float = 30.0
    live_every: float = 300.0
    samples: list[JvmSample] = field(default_factory=list)
    live: list[LiveHeap] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _range: tuple[int, int] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> "JvmMonitor":
        self._thread = threading.Thread(target=self._loop, name="jvmmon", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _loop(self) -> None:
        next_live = time.time() + self.live_every
        while not self._stop.is_set():
            try:
                if self.live_every and time.time() >= next_live:
                    next_live += self.live_every
                    self.live.append(self.histogram())
                self.samples.append(self.sample())
            except (OSError, ValueError, subprocess.SubprocessError) as e:
                if len(self.errors) < 20:
                    self.errors.append(f"{time.strftime('%H:%M:%S')} {e}")
                if not _alive(self.pid):
                    return
            self._stop.wait(self.interval)

    def _jcmd(self, *command: str) -> str:
        done = subprocess.run(["jcmd", str(self.pid), *command], capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise ValueError(f"jcmd {' '.join(command)}: {done.stdout.strip()[-200:]} {done.stderr.strip()[-200:]}")
        return done.stdout

    def sample(self) -> JvmSample:
        info = self._jcmd("GC.heap_info")
        heap = HEAP_RANGE.search(info)
        meta = METASPACE.search(info)
        if heap is None or meta is None:
            raise ValueError(f"GC.heap_info said no heap or metaspace: {info[:200]!r}")
        self._range = (int(heap.group(3), 16), int(heap.group(4), 16))
        nmt: dict[str, int] = {}
        text = self._jcmd("VM.native_memory", "summary")
        if total := NMT_TOTAL.search(text):  # absent when the JVM runs without NMT
            nmt = {name: int(kb) for name, kb in NMT_CATEGORY.findall(text)} | {"Total": int(total.group(1))}
        rss, heap_rss = resident(self.pid, self._range)
        return JvmSample(time.time(), rss, heap_rss, int(heap.group(1)) * 1024, int(heap.group(2)) * 1024,
                         int(meta.group(2)) * 1024, nmt)

    def histogram(self) -> LiveHeap:
        text = self._jcmd("GC.class_histogram")  # a full collection first: what is counted is live
        total = HISTO_TOTAL.search(text)
        if total is None:
            raise ValueError(f"GC.class_histogram gave no total: {text[-200:]!r}")
        rows = {name: (int(n), int(b)) for n, b, name in HISTO_ROW.findall(text)[:TOP_CLASSES]}
        return LiveHeap(time.time(), int(total.group(2)), rows)


def resident(pid: int, heap: tuple[int, int]) -> tuple[int, int]:
    """(RSS of the process, RSS of its mappings inside the address range `heap`), bytes, from smaps."""
    total = inside = 0
    within = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            if line[0] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
                lo, hi = (int(x, 16) for x in line.split(" ", 1)[0].split("-"))
                within = lo >= heap[0] and hi <= heap[1]
            elif line.startswith("Rss:"):
                kb = int(line.split()[1]) * 1024
                total += kb
                inside += kb if within else 0
    return total, inside


def grown_classes(first: LiveHeap, last: LiveHeap, top: int = 12) -> list[dict]:
    """The classes whose live bytes grew most from `first` to `last` (among each one's biggest classes)."""
    names = set(first.by_class) | set(last.by_class)
    rows = [{"class": n, "instances": last.by_class.get(n, (0, 0))[0] - first.by_class.get(n, (0, 0))[0],
             "bytes": last.by_class.get(n, (0, 0))[1] - first.by_class.get(n, (0, 0))[1],
             "last_bytes": last.by_class.get(n, (0, 0))[1]} for n in names]
    return sorted(rows, key=lambda r: -r["bytes"])[:top]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat"):
            return True
    except OSError:
        return False
