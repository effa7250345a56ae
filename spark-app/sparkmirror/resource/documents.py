"""YAML text to documents, with bad input as one clear line instead of a parser traceback. Pure: text in.

PyYAML's own errors span several lines and a document that is a list or a scalar where a mapping belongs makes
later code fail far from the cause; here both become an `InputError` naming the input (and the document, line
and column). `sparkmirror.inputs` adds reading files; the importer uses this directly.
"""
from __future__ import annotations

from typing import Any

import yaml


class InputError(ValueError):
    """Input the user can fix; the message names the file and, where known, the place in it (one line per
    problem)."""


def yaml_error(label: str, e: yaml.YAMLError, text: str = "") -> InputError:
    """One line for a YAML error: what the parser found and where (line and column)."""
    if isinstance(e, yaml.reader.ReaderError):  # a character YAML does not allow: no mark, a position
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        return InputError(f"{label}: not valid YAML: character #x{e.character:04x} is not allowed "
                          f"(line {line}, column {column})")
    problem = getattr(e, "problem", None) or getattr(e, "context", None) or str(e)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return InputError(f"{label}: not valid YAML: {' '.join(str(problem).split())}{where}")


def yaml_documents(text: str, label: str) -> list[Any]:
    """The non-empty documents of a YAML stream, or InputError naming `label`."""
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise yaml_error(label, e, text) from None
    except RecursionError:  # absurdly deep nesting
        raise InputError(f"{label}: not valid YAML: nested too deeply") from None


def kind_of(value: Any) -> str:
    """How a user would call a YAML value that should have been a mapping."""
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return type(value).__name__


def mapping_documents_of(text: str, label: str, what: str) -> list[tuple[str, dict[str, Any]]]:
    """(label, mapping) of every document of a YAML stream that must hold `what` (e.g. "a KafkaMirrorMaker2
    resource"); InputError when there is none or a document is a list or a scalar."""
    docs = yaml_documents(text, label)
    if not docs:
        raise InputError(f"{label}: empty: expected {what}")
    out = []
    for i, d in enumerate(docs):
        where = label if len(docs) == 1 else f"{label} (document {i + 1})"
        if not isinstance(d, dict):
            raise InputError(f"{where}: expected {what} (a mapping), got {kind_of(d)}")
        out.append((where, d))
    return out
