"""sparkmirror's benchmark against Apache Kafka's MirrorMaker 2 on local KRaft clusters.

Run it with `python -m bench` (or `bench/run.py`); `python -m bench --help` lists the knobs.
"""
from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    from .cli import main as _main

    return _main(argv)
