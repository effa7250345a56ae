"""What every model of the resource shares: the strict base class, CEL rules, the Connect-only marker.

Apart from the models so that the clusters', status' and spec's modules build on it without importing each other.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

CONNECT_ONLY = "connectOnly"  # json_schema_extra marker; crdgen strips it, status reports set fields


def connect_only(description: str, **kw: Any) -> Any:
    """A Strimzi field that only makes sense for Kafka Connect: accepted, reported as not applicable."""
    return Field(None, description=f"{description} Kafka Connect only: accepted for Strimzi compatibility, "
                                   "not applicable to sparkmirror (reported on the status).",
                 json_schema_extra={CONNECT_ONLY: True}, **kw)


def cel(rule: str, message: str, field_path: str | None = None, reason: str | None = None) -> dict[str, str]:
    r: dict[str, str] = {"rule": rule, "message": message}
    if field_path:
        r["fieldPath"] = field_path
    if reason:
        r["reason"] = reason
    return r


def validations(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, serialize_by_alias=True, use_enum_values=True)


def connect_only_fields(obj: BaseModel, path: str = "spec") -> list[str]:
    """Paths of the Connect-only fields set on a (sub)model, walking nested models and lists."""
    found: list[str] = []
    for name, info in type(obj).model_fields.items():
        value = getattr(obj, name)
        if value is None:
            continue
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if extra.get(CONNECT_ONLY):
            found.append(f"{path}.{name}")
        elif isinstance(value, BaseModel):
            found += connect_only_fields(value, f"{path}.{name}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                if isinstance(v, BaseModel):
                    found += connect_only_fields(v, f"{path}.{name}[{i}]")
    return found
