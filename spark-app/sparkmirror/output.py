"""`-o json|yaml` for every `sparkmirror` command that prints state: one flag, one serialisation.

Machine-readable output goes to stdout and nothing else does, so `sparkmirror ... -o json | jq` works; the
human-readable form stays the default.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

import yaml

FORMATS = ("json", "yaml")


def add_output_flag(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    parser.add_argument("-o", "--output", choices=FORMATS, default=None,
                        help=f"print {what} as json or yaml instead of text")


def dump(data: Any, fmt: str, stream: bool = False) -> str:
    """`data` as `fmt`; `stream` for one of many states printed over time: a JSON line, or a YAML document."""
    if fmt == "json":
        return json.dumps(data, separators=(",", ":") if stream else None, indent=None if stream else 2,
                          default=str) + "\n"
    if fmt == "yaml":
        return ("---\n" if stream else "") + yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    raise ValueError(f"unknown output format {fmt!r}; expected one of {FORMATS}")
