"""The `sparkmirror` command: each subcommand lives beside what it drives and registers itself here.

Imports are lazy so `sparkmirror dev` needs no pyspark and `sparkmirror operator` needs no pyspark either.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand module -> must define add_parser(subparsers); the parser's `func(args) -> int` runs it
SUBCOMMANDS = [
    "sparkmirror.devenv.cli",        # dev up / down / status
    "sparkmirror.runner.cli",        # run -f FILE
    "sparkmirror_operator.cli",      # operator, import
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkmirror", description="Kafka mirroring on Spark, run by an operator.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and (name.startswith(e.name) or e.name == name):
                continue  # that part is not installed in this image
            raise
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
