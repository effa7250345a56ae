"""Another Python worker, for tests of what lanes do across the worker processes of one executor."""
from __future__ import annotations

import logging


def keep_lane(config_json: str, parts: list, epoch_seconds: float, started, done) -> None:
    """Run epoch 10 of the first mirror's lane 0 and keep its clients (copying on between epochs, as a Spark
    Python worker does) until `done` is set. A `multiprocessing` spawn target: importable by the child."""
    from sparkmirror.copying import LaneCopier
    from sparkmirror.resource.flowgroup import FlowGroupConfig

    logging.basicConfig(level=logging.INFO)
    cfg = FlowGroupConfig.model_validate_json(config_json)
    LaneCopier(cfg, cfg.mirrors[0], 0, parts, epoch_seconds, epoch=10, prev_epoch=0, carry_seconds=600.0).run()
    started.set()
    done.wait(600)
