"""`sparkmirror failover -f FILE --mirror NAME`: move a mirror's consumers from its source to its target.

1. (with --wait-caught-up S) wait until the mirror has copied everything the source holds: a planned
   switch, producers stopped first;
2. stop the mirror's flow groups at a consistent point: a failover mark on the progress topic, and every
   transactional id their lanes held fenced. A running `sparkmirror run` sees it and exits; a driver started
   later refuses to copy those flow groups until `sparkmirror failover --undo`;
3. translate every selected consumer group's committed offsets exactly (source reachable), or take its last
   checkpoints on the target (source unreachable: asked once, at most 5 s, then never again; each group's
   checkpointAgeMs says how old its checkpoint was), and commit them to the same group on the target, only
   for groups with no active members there, never moving a group backwards. Groups that could not move are
   named in groupsNotMoved.

Exit status: 0 every selected group can resume on the target; 1 some cannot (members active on the target,
a partition without an exact position) or a cluster did not answer; 2 a file or option is invalid.
"""
from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from pathlib import Path

from confluent_kafka import KafkaException

from ..output import add_output_flag, dump
from ..resource.javaregex import JavaPatternError, compile_java


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("failover", help="stop a mirror at a consistent point and move its consumer groups "
                              "to the target", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-f", "--file", action="append", required=True, metavar="FILE",
                   help="KafkaMirrorMaker2 resource file (YAML, several documents allowed); repeat for more")
    p.add_argument("--mirror", metavar="NAME", help="the mirror: its name, or its source cluster's alias "
                   "(default: the only mirror of the files)")
    p.add_argument("--groups", metavar="REGEX", help="only these consumer groups (whole-name match; default every "
                   "group the mirror's `groups`/`groupsExclude` select)")
    p.add_argument("--wait-caught-up", type=float, default=0.0, metavar="SECONDS",
                   help="first wait up to SECONDS for the mirror to copy everything (a planned switch); "
                        "nothing is changed when it does not")
    p.add_argument("--undo", action="store_true", help="let the mirror's flow groups copy again (after a drill)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each cluster request")
    p.add_argument("-v", "--verbose", action="store_true", help="Kafka client logs on the console")
    p.add_argument("--log-file", type=Path, metavar="PATH",
                   help="where those logs go without -v (default a new file in the temp directory)")
    add_output_flag(p, "the report")
    p.set_defaults(func=run, back=False)
    b = subparsers.add_parser("failback", help="move consumer groups back to a failed-over mirror's source",
                              description=BACK_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("-f", "--file", action="append", required=True, metavar="FILE",
                   help="resource files holding the failed-over mirror and its reverse (target -> source)")
    b.add_argument("--mirror", metavar="NAME", help="the failed-over mirror: its name or its source cluster's alias")
    b.add_argument("--groups", metavar="REGEX", help="only these consumer groups (whole-name match)")
    b.add_argument("--wait-caught-up", type=float, default=0.0, metavar="SECONDS",
                   help="first wait up to SECONDS for the reverse mirror to copy everything")
    b.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each cluster request")
    b.add_argument("-v", "--verbose", action="store_true", help="Kafka client logs on the console")
    b.add_argument("--log-file", type=Path, metavar="PATH", help="where those logs go without -v")
    add_output_flag(b, "the report")
    b.set_defaults(func=run, back=True, undo=False)
    return p


BACK_HELP = """`sparkmirror failback -f FILE... --mirror NAME`: after `failover`, move consumers back to the source.

The files hold the failed-over mirror (a -> b) and its reverse (b -> a, copying what producers wrote on b since).
1. the reverse mirror is failed over: stopped at a consistent point, each group's offsets on b's own topics
   translated onto their copies on a;
2. each group's offsets on the failed-over mirror's remote topics on b are translated back through its offset
   map and committed on the original topics on a (KIP-1098's reverse checkpoints, exact);
3. the failover of the mirror is undone: it copies again from where it stopped.
Exit status as for `failover`.
"""


def _reverse(configs, mirror):
    """(flow groups carrying the reverse of `mirror`, that mirror) or an error line."""
    found = [(c, m) for c in configs for m in c.mirrors if m.source == mirror.target and m.target == mirror.source]
    if not found:
        return (f"--file: no mirror from {mirror.target!r} back to {mirror.source!r} in the files: failback needs "
                f"the reverse mirror of {mirror.name} (what producers wrote on {mirror.target!r} is copied back)")
    if len({m.name for _c, m in found}) > 1:
        return f"--file: several mirrors from {mirror.target!r} to {mirror.source!r}: keep one in the files"
    return [c for c, _m in found], found[0][1]


def _err(msg: str) -> None:
    print(f"sparkmirror failover: {msg}", file=sys.stderr, flush=True)


def _choose(configs, name: str | None):
    """(flow groups carrying the mirror, the mirror) or an error line."""
    found = [(c, m) for c in configs for m in c.mirrors if name is None or name in (m.name, m.source)]
    mirrors = sorted({(c.resource, m.name) for c, m in found})
    if not mirrors:
        have = sorted({f"{m.name} (source {m.source})" for c in configs for m in c.mirrors})
        return f"--mirror: no mirror named {name!r} or with that source; the files hold: {', '.join(have)}"
    if len(mirrors) > 1:
        return (f"--mirror: {'the files hold' if name is None else f'{name!r} matches'} several mirrors "
                f"({', '.join(f'{r}: {m}' for r, m in mirrors)}): name one")
    return [c for c, _m in found], found[0][1]


def run(args: argparse.Namespace) -> int:
    from ..inputs import USAGE_EXIT
    from ..runner.cli import load_reported
    from ..runner.console import QuietConsole, default_log_path
    from ..runner.resources import secrets_reported
    from .report import named_groups
    from .run import NotCaughtUp, failover, undo_all

    loaded = load_reported(args, _err)
    if loaded is None or secrets_reported(loaded, _err):
        return USAGE_EXIT
    chosen = _choose(loaded.configs, args.mirror)
    if isinstance(chosen, str):
        _err(chosen)
        return USAGE_EXIT
    try:
        select = compile_java(args.groups).fullmatch if args.groups else (lambda _g: True)
    except JavaPatternError as e:
        _err(f"--groups: invalid regex {e}")
        return USAGE_EXIT
    if args.timeout <= 0 or args.wait_caught_up < 0:
        _err("--timeout must be above 0 and --wait-caught-up at least 0")
        return USAGE_EXIT
    configs, mirror = chosen
    reverse = _reverse(loaded.configs, mirror) if args.back else None
    if isinstance(reverse, str):
        _err(reverse)
        return USAGE_EXIT
    log_path = None if args.verbose else (args.log_file or default_log_path())
    with ExitStack() as stack:
        try:
            console = stack.enter_context(QuietConsole(log_path)) if log_path else None
        except OSError as e:
            _err(f"--log-file: cannot write {log_path}: {e.strerror or e}")
            return USAGE_EXIT
        if console is not None:
            _err(f"logs (Kafka clients): {console.log_path}; -v shows them here")
        try:
            if reverse is not None:
                from .back import failback

                doc = failback(configs, mirror, *reverse, select, args.timeout, args.wait_caught_up, _err)
            elif args.undo:
                doc = undo_all(configs, mirror, args.timeout)
            else:
                doc = failover(configs, mirror, select, args.timeout, args.wait_caught_up, _err,
                               named=named_groups(args.groups))
        except NotCaughtUp as e:
            _err(f"--wait-caught-up: {e}")
            return 1
        except (KafkaException, RuntimeError, TimeoutError) as e:  # a cluster did not answer or refused: exit 1
            _err(" ".join(str(e).split()))
            return 1
    from .report import table

    sys.stdout.write(dump(doc, args.output) if args.output else table(doc))
    sys.stdout.flush()
    return 0 if doc.get("ok", True) else 1


