"""Topic, group and config-name patterns as MirrorMaker 2 reads them: Java's `java.util.regex.Pattern`, whole-name
matches (`Matcher.matches()`), on Python's `re`.

Most of a pattern means the same in both; what does not is translated here, and what Python cannot match as
Java does is refused by name (`JavaPatternError`), never matched differently:
- Java's predefined classes and case folding are US-ASCII unless asked otherwise: compiled with `re.ASCII`
  (`\\d`, `\\w`, `\\s`, `\\b`, `(?i)` as Java's);
- `.` leaves out every Java line terminator (`\\n`, `\\r`, `\\u0085`, `\\u2028`, `\\u2029`), not `\\n` alone;
- `\\Q...\\E` quotes; `\\p{Lower}`, `\\p{Alpha}`, ... (the POSIX classes, US-ASCII) and `\\P{...}`; `\\e`;
  `\\z`; `(?<name>...)` and `\\k<name>`;
- inline flags anywhere (`a(?i)b|c`): Java applies them to the rest of the group, each alternative included;
  Python takes them only at the start, so they become scoped groups (`a(?i:b)|(?i:c)`);
- possessive quantifiers and atomic groups need nothing (Python 3.11).
Refused: class intersections and unions (`[a-z&&[^e]]`, `[a[b]]`), `\\Z`, `\\G`, `\\R`, `\\X`, `\\h`, `\\v`,
`\\c`, octal `\\0`, `\\x{...}`, Unicode classes other than the POSIX ones, flags other than i, m, s, and a `{`
that is no quantifier. Pure: a resource's patterns are checked where the resource is planned.
"""
from __future__ import annotations

import functools
import re

_LINE_TERMINATORS = "\\n\\r\\u0085\\u2028\\u2029"
_POSIX = {  # Java's POSIX classes, US-ASCII (no UNICODE_CHARACTER_CLASS): as ranges for a character class
    "Lower": "a-z", "Upper": "A-Z", "ASCII": "\\x00-\\x7f", "Alpha": "a-zA-Z", "Digit": "0-9",
    "Alnum": "a-zA-Z0-9", "Punct": "!-/:-@\\[-`{-~", "Graph": "!-~", "Print": " -~", "Blank": " \\t",
    "Cntrl": "\\x00-\\x1f\\x7f", "XDigit": "0-9a-fA-F", "Space": " \\t\\n\\x0b\\f\\r",
}
_SAME_ESCAPES = set("dDsSwWbBAtnrfa")
_QUANTIFIER = re.compile(r"\{\d+(?:,\d*)?\}")
_FLAGS = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?([:)])")
_NAMED = re.compile(r"\(\?<([a-zA-Z][a-zA-Z0-9]*)>")


class JavaPatternError(ValueError):
    """A pattern Java reads one way and Python would read another (or not at all)."""


class _Level:
    """One group's state: the flag scopes opened inside it (closed at its `)` and around each `|`), and the
    flags in force (for `.`)."""

    def __init__(self, dotall: bool) -> None:
        self.scopes: list[str] = []
        self.dotall = dotall


def _posix(name: str, pattern: str) -> str:
    if name.startswith("Is") and name[2:] in _POSIX:
        name = name[2:]
    if name not in _POSIX:
        raise JavaPatternError(f"{pattern!r}: \\p{{{name}}} (only Java's POSIX classes are matched as Java does)")
    return _POSIX[name]


def translate(pattern: str) -> str:
    """The Python pattern that decides as Java's does (to be compiled with re.ASCII); JavaPatternError else."""
    out: list[str] = []
    levels = [_Level(dotall=False)]
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise JavaPatternError(f"{pattern!r}: a trailing backslash")
            e = pattern[i + 1]
            if e == "Q":
                end = pattern.find("\\E", i + 2)
                literal = pattern[i + 2:] if end < 0 else pattern[i + 2:end]
                out.append("".join("\\" + ch if not ch.isalnum() else ch for ch in literal))
                i = n if end < 0 else end + 2
                continue
            if e in "pP":
                m = re.match(r"\{(\w+)\}|(\w)", pattern[i + 2:])
                if m is None:
                    raise JavaPatternError(f"{pattern!r}: \\{e} without a class name")
                ranges = _posix(m.group(1) or m.group(2), pattern)
                if in_class and e == "P":
                    raise JavaPatternError(f"{pattern!r}: \\P{{...}} inside a character class")
                out.append(ranges if in_class else f"[{'^' if e == 'P' else ''}{ranges}]")
                i += 2 + m.end()
                continue
            if e == "k":
                m = re.match(r"<([a-zA-Z][a-zA-Z0-9]*)>", pattern[i + 2:])
                if m is None:
                    raise JavaPatternError(f"{pattern!r}: \\k without a group name")
                out.append(f"(?P={m.group(1)})")
                i += 2 + m.end()
                continue
            if e == "z":
                out.append("\\Z")
            elif e == "e":
                out.append("\\x1b")
            elif e == "x" and pattern[i + 2:i + 3] == "{":
                raise JavaPatternError(f"{pattern!r}: \\x{{...}}")
            elif e in "ZGRXhHvVcN0" or (e.isalpha() and e not in _SAME_ESCAPES | set("xu")):
                raise JavaPatternError(f"{pattern!r}: \\{e} (Java and Python read it differently, or Python not "
                                       "at all)")
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "[" or pattern.startswith("&&", i):
                raise JavaPatternError(f"{pattern!r}: a class union or intersection ('[' or '&&' in a class)")
            if c == "]":
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            start = i + 2 if pattern.startswith("[^", i) else i + 1
            if pattern[start:start + 1] == "]":
                raise JavaPatternError(f"{pattern!r}: ']' first in a class")
            out.append(pattern[i:start])
            i = start
            continue
        if c == "(":
            flags = _FLAGS.match(pattern, i)
            if flags is not None:
                on, off, end = flags.group(1), flags.group(2) or "", flags.group(3)
                if set(on + off) - set("ims"):
                    raise JavaPatternError(f"{pattern!r}: flags {on + off!r} (only i, m and s are matched as Java "
                                           "does)")
                spec = on + (f"-{off}" if off else "")
                dotall = ("s" in on or levels[-1].dotall) and "s" not in off
                if end == ":":
                    levels.append(_Level(dotall))
                    out.append(f"(?{spec}:" if spec else "(?:")
                else:  # to the end of the enclosing group, every alternative of it
                    if spec:
                        levels[-1].scopes.append(spec)
                        out.append(f"(?{spec}:")
                    levels[-1].dotall = dotall
                i = flags.end()
                continue
            named = _NAMED.match(pattern, i)
            levels.append(_Level(levels[-1].dotall))
            if named is not None:
                out.append(f"(?P<{named.group(1)}>")
                i = named.end()
            else:
                out.append(c)
                i += 1
            continue
        if c == ")":
            if len(levels) == 1:
                raise JavaPatternError(f"{pattern!r}: unbalanced ')'")
            out.append(")" * len(levels.pop().scopes) + ")")
            i += 1
            continue
        if c == "|":
            scopes = levels[-1].scopes
            out.append(")" * len(scopes) + "|" + "".join(f"(?{s}:" for s in scopes))
            i += 1
            continue
        if c == "{":
            m = _QUANTIFIER.match(pattern, i)
            if m is None:
                raise JavaPatternError(f"{pattern!r}: a '{{' that is no quantifier")
            out.append(m.group(0))
            i = m.end()
            continue
        if c == ".":
            out.append("." if levels[-1].dotall else f"[^{_LINE_TERMINATORS}]")
            i += 1
            continue
        out.append(c)
        i += 1
    if in_class:
        raise JavaPatternError(f"{pattern!r}: an unclosed character class")
    if len(levels) > 1:
        raise JavaPatternError(f"{pattern!r}: an unclosed group")
    return "".join(out) + ")" * len(levels[0].scopes)


@functools.lru_cache(maxsize=1024)
def compile_java(pattern: str) -> re.Pattern[str]:
    """Java's pattern for whole-name matches (`.fullmatch`); JavaPatternError names what cannot be matched as
    Java does (a ValueError, so model validators report it as bad input)."""
    try:
        return re.compile(translate(pattern), re.ASCII)
    except re.error as e:
        raise JavaPatternError(f"{pattern!r}: {e}") from None
