"""The mirror job's entry point: `spark-submit job.py --config flowgroup.yaml` (or `python -m sparkmirror.job`,
or `sparkmirror.job:main`). One Spark application per flow group; its life is `driver.Driver`'s.
Imports are absolute because spark-submit runs this file as a script.
"""
from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__" and sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    # run as a script from inside the package: its folder must not shadow the standard library (`resource`)
    sys.path.pop(0)

import argparse  # noqa: E402
import logging  # noqa: E402

from sparkmirror.driver import Driver  # noqa: E402
from sparkmirror.resource.flowgroup import FlowGroupConfig  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkmirror-job", description="Run one sparkmirror flow group.")
    parser.add_argument("--config", required=True, help="flow-group YAML (FlowGroupConfig)")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*,4])")
    parser.add_argument("--checkpoint", help="Spark checkpoint root (an optimisation; may be lost)")
    parser.add_argument("--conf", action="append", default=[], metavar="K=V", help="extra Spark conf")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = FlowGroupConfig.from_yaml(Path(args.config).read_text())
    except Exception as e:  # noqa: BLE001 - the message names the field
        print(f"sparkmirror: {args.config}: invalid flow-group config: {e}", file=sys.stderr)
        return 2
    extra = dict(kv.split("=", 1) for kv in args.conf)
    return Driver([config], args.master, extra, args.checkpoint).run()


if __name__ == "__main__":
    sys.exit(main())
