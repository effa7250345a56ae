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
import faulthandler  # noqa: E402
import logging  # noqa: E402

from sparkmirror.driver import Driver  # noqa: E402
from sparkmirror.inputs import USAGE_EXIT, InputError, key_values, mapping_documents  # noqa: E402
from sparkmirror.queries import claim_driver_env  # noqa: E402
from sparkmirror.resource.flowgroup import FlowGroupConfig  # noqa: E402
from sparkmirror.runner.resources import config_secret_problems  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparkmirror-job", description="Run one sparkmirror flow group.")
    parser.add_argument("--config", required=True, help="flow-group YAML (FlowGroupConfig)")
    parser.add_argument("--master", help="Spark master (default: spark-submit's, else local[*,4])")
    parser.add_argument("--checkpoint", help="Spark checkpoint root (an optimisation; may be lost)")
    parser.add_argument("--conf", action="append", default=[], metavar="K=V", help="extra Spark conf")
    args = parser.parse_args(argv)
    if not faulthandler.is_enabled():  # a crash in a C extension says where, in every thread, not just -11
        faulthandler.enable()
    claim_driver_env()  # before any thread: the JVM Spark starts inherits it
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config)
        extra = key_values(args.conf, "--conf")
        problems = config_secret_problems(config)  # read before Spark starts: a usage error, not a traceback
        if problems:
            raise InputError("\n".join(f"{args.config}: {p}" for p in problems))
    except InputError as e:
        for line in str(e).splitlines():
            print(f"sparkmirror-job: {line}", file=sys.stderr)
        return USAGE_EXIT
    return Driver([config], args.master, extra, args.checkpoint).run()


def load_config(path: str) -> FlowGroupConfig:
    """The flow-group config of a file, or InputError with one line per problem, each naming file and field."""
    from pydantic import ValidationError

    from sparkmirror.resource.plan import validation_problems

    (label, doc), *more = mapping_documents(path, "a flow-group config")
    if more:
        raise InputError(f"{path}: {len(more) + 1} documents: expected one flow-group config")
    try:
        return FlowGroupConfig.model_validate(doc)
    except ValidationError as e:
        raise InputError("\n".join(f"{label}: {p}" for p in validation_problems(e))) from None


if __name__ == "__main__":
    sys.exit(main())
