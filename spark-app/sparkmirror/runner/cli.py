"""`sparkmirror run -f FILE [-f FILE ...]`: every flow group of the resource files, in embedded local Spark.

The console shows the progress table (or, with -o json|yaml, its data) and nothing else: Spark's, the lanes' and
the Kafka clients' logs go to a log file the console names (--log-file); -v shows them on the console instead.

Exit status: 0 stopped cleanly (Ctrl-C, SIGTERM, or --until-caught-up reached); 1 a mirror failed, a cluster
is unreachable, or --timeout passed; 2 a file does not validate (the message names the file and the field).
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from ..output import add_output_flag, dump

if TYPE_CHECKING:
    from .resources import Loaded


def add_parser(subparsers) -> argparse.ArgumentParser:
    """`run`, and beside it `plan`, its dry run (one entry point: both need the same parts installed)."""
    from .dryrun import add_parser as add_plan

    add_plan(subparsers)
    p = subparsers.add_parser("run", help="run a KafkaMirrorMaker2 resource file in local Spark",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_spark_flags(p, "Spark master (default local threads: two per lane, at least 4)",
                    "Spark, lane and Kafka client logs on the console (INFO) instead of in the log file")
    p.add_argument("--checkpoint", help="Spark checkpoint root (an optimisation; default a temp dir)")
    p.add_argument("--check", action="store_true", help="validate, print the flow groups and exit")
    p.add_argument("--until-caught-up", action="store_true",
                   help="exit 0 once every mirror has mirrored everything (lag 0)")
    p.add_argument("--timeout", type=float, help="give up (exit 1) after this many seconds")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between progress updates")
    p.add_argument("--no-watch", dest="watch", action="store_false",
                   help="do not hand running flow groups over to a changed resource file")
    add_output_flag(p, "the flow groups (--check) or each progress update")
    p.set_defaults(func=run)
    return p


def add_spark_flags(p: argparse.ArgumentParser, master_help: str, verbose_help: str) -> None:
    """What every command that runs resource files on Spark takes: the files, the master, Spark conf, logs."""
    p.add_argument("-f", "--file", action="append", required=True, metavar="FILE",
                   help="KafkaMirrorMaker2 resource file (YAML, several documents allowed); repeat for more")
    p.add_argument("--master", help=master_help)
    p.add_argument("--conf", action="append", default=[], metavar="K=V", help="extra Spark configuration")
    p.add_argument("-v", "--verbose", action="store_true", help=verbose_help)
    p.add_argument("--log-file", type=Path, metavar="PATH",
                   help="where those logs go without -v (default a new file in the temp directory)")


def load_reported(args: argparse.Namespace, err) -> "Loaded | None":
    """The flow groups of the files `add_spark_flags` took (with -v, logging on the console first), or None
    after `err` printed one line per problem (exit 2)."""
    from .console import LOG_FORMAT
    from .resources import load_reporting

    if args.verbose:
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    return load_reporting(args.file, err)


def _err(msg: str) -> None:
    print(f"sparkmirror run: {msg}", file=sys.stderr, flush=True)


def follow_changes(local, watch) -> None:
    """A changed resource file: hand the flow groups that changed over to a new worker generation (no stop)."""
    from .resources import InvalidResource

    try:
        loaded = watch.changed()
    except InvalidResource as e:
        _err(f"the changed resource does not validate; still running the previous one:\n{e}")
        return
    if loaded is None:
        return
    for record in local.handoff(loaded.configs):
        print(f"sparkmirror run: handed {', '.join(record['from']) or '-'} over to {', '.join(record['to']) or '-'}"
              f" (worker generation {record['generation']}): taken over in {record['tookOverMs']} ms",
              file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from ..inputs import USAGE_EXIT, InputError, key_values

    loaded = load_reported(args, _err)
    if loaded is None:
        return USAGE_EXIT
    for w in loaded.warnings:
        _err(f"warning: {w}")
    if args.check:
        if args.output:
            sys.stdout.write(dump(check_state(loaded), args.output))
            return 0
        for cfg in loaded.configs:
            print(f"flow group {cfg.name}: " + ", ".join(f"{m.source} -> {m.target} (topics {m.topics})"
                                                         for m in cfg.mirrors))
        return 0
    try:
        extra = key_values(args.conf, "--conf")
    except InputError as e:
        _err(str(e))
        return USAGE_EXIT

    from .resources import secrets_reported

    if secrets_reported(loaded, _err):
        return USAGE_EXIT

    from .console import QuietConsole, default_log_path

    log_path = None if args.verbose else (args.log_file or default_log_path())
    with QuietConsole(log_path) if log_path else nullcontext() as console:
        if console is not None:
            log_path = console.log_path  # an outer quiet console's (the demo's) file
            _err(f"logs (Spark, lanes, Kafka clients): {log_path}; -v shows them here")
        rc = _run_live(args, loaded, extra, console.out if console else sys.stdout)
    if log_path is not None and rc != 0:
        _err(f"see {log_path} for the logs")
    return rc


def check_state(loaded) -> dict:
    """What --check prints, as data: each flow group's mirrors and the warnings (no credentials: they are
    Secret references or environment variable names)."""
    return {"flowGroups": [{"name": cfg.name, "resource": cfg.resource, "delivery": cfg.delivery.value,
                            "lanes": cfg.lanes, "epochSeconds": cfg.epochSeconds, "progressTopic": cfg.progressTopic,
                            "mirrors": [{"name": m.name, "source": m.source, "target": m.target, "topics": m.topics,
                                         "topicsExclude": m.topicsExclude, "groups": m.groups,
                                         "replicationPolicy": m.replicationPolicy.value} for m in cfg.mirrors]}
                           for cfg in loaded.configs],
            "warnings": loaded.warnings}


def _run_live(args: argparse.Namespace, loaded, extra: dict[str, str], out) -> int:
    from .local import LocalRun, Unreachable, preflight, wait
    from .display import Progress

    try:
        preflight(loaded.configs, loaded.fields)
    except Unreachable as e:
        _err(str(e))
        return 1

    stop = threading.Event()

    def on_signal(signum, _frame) -> None:
        if stop.is_set():
            return
        print(f"\nsparkmirror run: {signal.Signals(signum).name}: stopping ...", file=sys.stderr, flush=True)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    progress = Progress(out, every=args.interval if args.output else max(args.interval, 5.0), fmt=args.output)
    local = LocalRun(loaded.configs, args.master, args.checkpoint, extra,
                     most_lanes={g: s.maxLanes for g, s in loaded.autoscaling.items()})
    from .autoscaler import LocalAutoscaler
    from .resources import ResourceWatch

    watch = ResourceWatch(args.file) if args.watch else None
    scaler = LocalAutoscaler(loaded.autoscaling)  # spec.autoscaling: the operator's rule, on this driver's lag

    def tick(r: LocalRun) -> None:
        progress.show(r.views(), r.failures())
        if watch is not None:
            follow_changes(r, watch)
        for line in scaler.tick(r):
            _err(line)

    from ..handoff.takeover import HandoffError
    from ..historybudget import HistoryTooLarge
    from ..inputs import USAGE_EXIT

    outcome = "stopped"
    try:
        try:
            local.start()
        except KeyboardInterrupt:  # Ctrl-C while Spark was starting (SparkContext's own SIGINT handler)
            stop.set()
        except HandoffError as e:  # e.g. failed over: it stays stopped
            _err(str(e))
            return 1
        except HistoryTooLarge as e:  # the offset history cannot fit the driver's memory: a usage error
            _err(str(e))
            return USAGE_EXIT
        # SparkContext replaces the SIGINT handler with one that cancels jobs and raises KeyboardInterrupt;
        # ours drains instead, so running epochs commit and the queries stop cleanly
        for s in previous:
            signal.signal(s, on_signal)
        outcome = wait(local, stop, on_tick=tick,
                       until=(lambda r: r.caught_up()) if args.until_caught_up else None,
                       interval=args.interval, timeout=args.timeout)
        progress.final(local.views(), local.failures())
    finally:
        failures = local.failures() if local.spark is not None else {}
        local.stop()
        for s, h in previous.items():
            signal.signal(s, h)
    if outcome == "failed" or failures:
        for name, msg in failures.items():
            _err(f"mirror {name!r} failed: {msg}")
        return 1
    if outcome == "timeout":
        _err(f"--timeout: not done after {args.timeout:.0f}s")
        return 1
    return 0
