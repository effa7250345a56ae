"""Names of derived objects: stable, within Kubernetes' limits (leaving room for Spark's pod-name suffixes)."""
from __future__ import annotations

import hashlib


def short_name(*parts: str, limit: int = 52) -> str:
    """`a-b-c`, or when longer than limit a stable truncation with a hash tail."""
    name = "-".join(p for p in parts if p)
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:limit - 9].rstrip('-')}-{digest}"


def rbac_name(resource: str) -> str:
    return short_name(resource, "spark")


def config_map_name(resource: str, group: str) -> str:
    return short_name(resource, group, "config")


def application_name(resource: str, group: str) -> str:
    return short_name(resource, group)


def lease_name(resource: str, group: str) -> str:
    return short_name(resource, group)
