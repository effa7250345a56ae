"""Other Python workers, for tests of what lanes do across the worker processes of one executor."""
from __future__ import annotations

import logging
import time


def run_lane(config_json: str, parts: list, epoch: int, prev_epoch: int, epoch_seconds: float,
             carry_seconds: float = 0.0, started=None, done=None) -> None:
    """Run `epoch` of the first mirror's lane 0 as a Spark task would; with `carry_seconds`, keep its clients
    (copying on between epochs, as a Spark Python worker does), set `started` and stay until `done` is set.
    A `multiprocessing` spawn target: importable by the child."""
    from sparkmirror.copying import lane_copy, run_epoch
    from sparkmirror.resource.flowgroup import FlowGroupConfig

    logging.basicConfig(level=logging.INFO)
    cfg = FlowGroupConfig.model_validate_json(config_json)
    run_epoch(lane_copy(cfg, cfg.mirrors[0], 0, parts, epoch_seconds, epoch=epoch, prev_epoch=prev_epoch,
                   carry_seconds=carry_seconds))
    if started is not None:
        started.set()
    until = time.monotonic() + 600
    while done is not None and not done.is_set() and time.monotonic() < until:
        time.sleep(0.2)  # not done.wait(): a waiter killed by a test would hang the test's done.set()
