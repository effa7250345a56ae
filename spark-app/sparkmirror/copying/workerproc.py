"""A reused Spark Python worker's process-wide settings, so a lane copying on a thread of it is not held still
by what the worker does for each task it runs (the thread waits for the GIL meanwhile)."""
from __future__ import annotations

import gc
import logging
import os
import sys
import time
import zipimport

log = logging.getLogger(__name__)

_FROZEN = False


def freeze_long_lived() -> None:
    """Once per worker process, at its first lane: collect, then move every object alive now (the modules of
    pyspark, pydantic, confluent-kafka and this job: about 68,000) out of the collector's reach (gc.freeze).
    A full collection holds the GIL while it walks every tracked object, and the lane's copying thread stands
    still meanwhile: at the benchmark's epoch ends they took 100-230 ms; a collection now walks the 35,000-
    40,000 objects made since. Objects made later are collected as before; the frozen ones live as long as
    the worker anyway."""
    global _FROZEN
    if _FROZEN:
        return
    _FROZEN = True
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info("worker %d: %d long-lived objects left out of garbage collection (%.0f ms)", os.getpid(),
             gc.get_freeze_count(), (time.perf_counter() - t0) * 1000)


class _KeptZipDirectory(zipimport.zipimporter):
    """A zip importer that keeps the directory it read: the archive does not change while the worker lives."""

    def invalidate_caches(self) -> None:
        pass


def keep_zip_directories() -> int:
    """Spark's worker calls importlib.invalidate_caches() before every task (pyspark.worker_util), and each zip
    importer then reads its whole archive's directory again, in Python with the GIL held: one per package
    imported from pyspark.zip (3.5 MB), 0.07-0.13 s of CPU in a bare interpreter and about 0.4 s in a lane's
    worker (py-spy: 78 of 1,081 samples at 200/s), at every epoch start of every task, while a kept lane copies
    on a thread of the same process. Converts the importers made so far (cheap: run at every epoch); returns
    how many."""
    n = 0
    for finder in list(sys.path_importer_cache.values()):
        if type(finder) is zipimport.zipimporter:
            finder.__class__ = _KeptZipDirectory
            n += 1
    return n


def settle_worker() -> None:
    """What a lane's epoch sets up in the worker process running it (a Spark task; tests and tools do not)."""
    freeze_long_lived()
    keep_zip_directories()
