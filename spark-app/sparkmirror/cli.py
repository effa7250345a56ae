"""The `sparkmirror` command. Subcommands register through the `sparkmirror.commands` entry-point group, each
beside what it drives: `run` and `operator` ship with the product, `dev` with the sparkmirror-dev tools.

Imports are lazy: a part that is not installed in an image (pyspark in the operator's, the dev tools in both)
simply has no subcommand there.
"""
from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import PackageNotFoundError, entry_points, version

GROUP = "sparkmirror.commands"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkmirror", description="Kafka mirroring on Spark, run by an operator.")
    parser.add_argument("--version", action="version", version=f"sparkmirror {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for ep in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            add_parser = ep.load()  # must define add_parser(subparsers); the parser's `func(args) -> int` runs it
        except ModuleNotFoundError as e:
            if e.name and (ep.module == e.name or ep.module.startswith(e.name + ".")):
                continue  # that part is not installed in this image
            raise
        add_parser(sub)
    return parser


def _version() -> str:
    """The installed distribution's version (a source checkout on PYTHONPATH alone has none)."""
    try:
        return version("sparkmirror")
    except PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    """Run a subcommand. Bad input is each command's to report (one line, exit 2); whatever else escapes is
    still one line here, not a traceback, unless SPARKMIRROR_DEBUG is set."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - the last resort: a user sees one line, a developer can ask for more
        if os.environ.get("SPARKMIRROR_DEBUG"):
            raise
        print(f"sparkmirror {args.command}: unexpected error: {type(e).__name__}: {' '.join(str(e).split())} "
              "(set SPARKMIRROR_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
