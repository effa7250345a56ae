"""Record transforms of a mirror (`mirrors[].transforms`): the schema, one definition for the resource and the
job's config (issue 38). Kafka Connect's SMTs (`transforms.*` connector keys) do not apply here: these are the
ones users of MirrorMaker 2 reach for most, plus a Python callable for the rest.

Applied in order to every record the mirror copies (`sparkmirror/transforms.py` compiles them). A dropped record
is not written, but its source offset is covered by the interval's progress like a record filtered as a loop, so
the offset map stays exact: a position on a dropped record translates to the next kept one. Pure pydantic.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, field_validator, model_validator

from .javaregex import JavaPatternError, compile_java
from .schemabase import StrictModel

HEADER_NAME = r"^[^\s]{1,256}$"
CALLABLE = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"


def _java(pattern: str | None) -> str | None:
    """A pattern Java reads as sparkmirror does (javaregex.py), else a ValueError pydantic names the field of."""
    if pattern is not None:
        try:
            compile_java(pattern)
        except JavaPatternError as e:
            raise ValueError(f"invalid regex {e}") from None
    return pattern


class DropRecords(StrictModel):
    """Drop the records that match every condition given (two transforms for either of two conditions)."""

    type: Literal["dropRecords"]
    header: str | None = Field(None, description="Drop records carrying a header of this name (any value, unless "
                               "headerValue is given).", pattern=HEADER_NAME)
    headerValue: str | None = Field(None, description="Regular expression (Java's, whole value) a value of the "
                                    "header must match (UTF-8; a null value never matches).", max_length=1024)
    key: str | None = Field(None, description="Regular expression (Java's, whole key) of the keys of records to "
                            "drop (UTF-8; a null key never matches).", max_length=1024)

    @field_validator("headerValue", "key")
    @classmethod
    def _java_pattern(cls, v: str | None) -> str | None:
        return _java(v)

    @model_validator(mode="after")
    def _some_condition(self) -> "DropRecords":
        if self.header is None and self.key is None:
            raise ValueError("dropRecords needs header or key")
        if self.headerValue is not None and self.header is None:
            raise ValueError("headerValue needs header")
        return self


class DropJsonFields(StrictModel):
    """Remove fields from JSON object values; a value that is not a JSON object is copied unchanged (and counted)."""

    type: Literal["dropJsonFields"]
    fields: list[Annotated[str, Field(min_length=1, max_length=512)]] = Field(
        description="Field paths, dot-separated for nested objects (`customer.email`).", min_length=1,
        max_length=256)


class RenameHeader(StrictModel):
    """Every header named `from` is named `to` (order and value kept)."""

    type: Literal["renameHeader"]
    from_: str = Field(alias="from", description="The header's name on the source.", pattern=HEADER_NAME)
    to: str = Field(description="Its name on the target.", pattern=HEADER_NAME)


class AddHeader(StrictModel):
    """A header appended to every record (its value UTF-8)."""

    type: Literal["addHeader"]
    name: str = Field(description="The header's name.", pattern=HEADER_NAME)
    value: str = Field(description="Its value.", max_length=4096)


def python_replacement(java: str) -> tuple[str, list[int | str]]:
    """Java's replacement string (`Matcher.replaceAll`: `$1`, `${name}`, `\\$` for a dollar) as Python's (`\\g<1>`),
    and the groups it names; ValueError for what Java would refuse."""
    out, refs, i = [], [], 0
    while i < len(java):
        c = java[i]
        if c == "\\":
            if i + 1 == len(java):
                raise ValueError("a replacement may not end with a backslash")
            out.append(java[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$":
            if java[i + 1:i + 2] == "{":
                end = java.find("}", i)
                if end < 0:
                    raise ValueError("an unclosed ${name} in the replacement")
                ref: int | str = java[i + 2:end]
                i = end + 1
            else:
                j = i + 1
                while j < len(java) and java[j].isdigit():
                    j += 1
                if j == i + 1:
                    raise ValueError("a $ in the replacement names no group (write \\$ for a dollar)")
                ref, i = int(java[i + 1:j]), j
            refs.append(ref)
            out.append(f"\\g<{ref}>")
        else:
            out.append(c)
            i += 1
    return "".join(out), refs


class Route(StrictModel):
    """The remote topic's name (MM2's RegexRouter on the name the replication policy made): where `topics`
    matches the whole name, it becomes `replacement`. Applied to the topic, not per record; routes apply in the
    order listed, each to the name the one before made. Two source topics routed to one remote name are a
    conflict: the second is not mirrored (`sparkmirror plan` shows it)."""

    type: Literal["route"]
    topics: str = Field(description="Regular expression (Java's, whole name) of the remote topic names to route, "
                        "as the replication policy makes them (`a.orders`).", max_length=1024)
    replacement: str = Field(description="The new name, Java's replacement syntax (`dr-$1`, `${name}`).",
                             min_length=1, max_length=249)

    @model_validator(mode="after")
    def _groups(self) -> "Route":
        rx = compile_java(_java(self.topics) or "")
        _, refs = python_replacement(self.replacement)
        for ref in refs:
            if (isinstance(ref, int) and ref > rx.groups) or (isinstance(ref, str) and ref not in rx.groupindex):
                raise ValueError(f"replacement names group {ref!r}, which topics does not have")
        return self

    def rename(self, name: str) -> str:
        m = compile_java(self.topics).fullmatch(name)
        return m.expand(python_replacement(self.replacement)[0]) if m else name


class PythonTransform(StrictModel):
    """A function of a module in the image: given a `sparkmirror.transforms.Record`, it returns it, a changed copy,
    or None to drop it. It runs on the executors, once per record, in the lanes' Python workers."""

    type: Literal["python"]
    callable: str = Field(description="`module:function`, importable in the Spark image.", pattern=CALLABLE,
                          max_length=512)


Transform = Annotated[Union[DropRecords, DropJsonFields, RenameHeader, AddHeader, PythonTransform, Route],
                      Field(discriminator="type")]
"""One record transform of `mirrors[].transforms`."""

TRANSFORM_HELP = ("use the mirror's own `transforms` field (dropRecords, dropJsonFields, renameHeader, addHeader, "
                  "route, python); Kafka Connect SMTs do not run here")
