"""Files a user hands to a command, read so that bad input is one clear line, never a traceback.

Every command that reads a file (`sparkmirror import`, `sparkmirror run -f`, the job's `--config`) goes through
here: a missing file, a directory, unreadable bytes, broken YAML or a document that is not a mapping become an
`InputError` whose message names the file (and the document, line and column), and the command exits 2.
Messages never quote the offending bytes: a properties file may hold a password next to them.
Shared by the job, the runner and the operator's CLI; the YAML part is `sparkmirror.resource.documents` (pure).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from .resource.documents import InputError, mapping_documents_of

__all__ = ["USAGE_EXIT", "InputError", "decode_utf8", "key_values", "mapping_documents", "read_text"]

USAGE_EXIT = 2  # what every sparkmirror command returns for bad input or usage (argparse's own code)


def read_text(path: str | Path) -> str:
    """The UTF-8 text of a file ('-' is standard input), or InputError naming the file and what is wrong."""
    name = str(path)
    try:
        data = sys.stdin.buffer.read() if name == "-" else Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{name}: is a directory, not a file") from None
    except PermissionError:
        raise InputError(f"{name}: permission denied") from None
    except OSError as e:
        raise InputError(f"{name}: cannot read: {e.strerror or type(e).__name__}") from None
    return decode_utf8(data, "stdin" if name == "-" else name)


def decode_utf8(data: bytes, what: str) -> str:
    """Bytes as UTF-8 text, or InputError saying where the first bad byte is (line and column, not its value)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise InputError(f"{what}: not UTF-8 text (line {line}, column {column})") from None


def mapping_documents(path: str | Path, what: str) -> list[tuple[str, dict[str, Any]]]:
    """(label, mapping) of every document of a YAML file that must hold `what`; InputError names the file."""
    return mapping_documents_of(read_text(path), "stdin" if str(path) == "-" else str(path), what)


def key_values(pairs: list[str], option: str) -> dict[str, str]:
    """Repeated `K=V` options as a dict, or InputError naming the option and the bad pair."""
    out = {}
    for kv in pairs:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise InputError(f"{option}: expected K=V, got {kv!r}")
        out[k] = v
    return out
