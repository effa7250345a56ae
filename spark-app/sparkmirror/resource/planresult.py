"""What `plan` (plan.py) returns: the flow-group configs, the Secrets they read, and what could not be carried
over, each problem naming its field. Apart from plan.py so the parts that add to a plan (mm2keys.py,
clientcheck.py) need not import the planner."""
from __future__ import annotations

from dataclasses import dataclass, field

from .clientconf import ClientKey
from .flowgroup import FlowGroupConfig
from .model import KafkaMirrorMaker2


class ResourceInvalid(ValueError):
    """The resource cannot be turned into flow groups; `problems` name the fields."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class SecretRef:
    """A key of a Secret the job needs, and where the job finds it."""

    secret: str
    key: str | None  # None: every key matching `pattern`
    pattern: str | None = None
    field: str = ""  # the resource field that refers to it


@dataclass
class Plan:
    resource: KafkaMirrorMaker2 | None
    groups: list[FlowGroupConfig] = field(default_factory=list)
    group_mirrors: dict[str, list[str]] = field(default_factory=dict)
    cluster_fields: dict[str, str] = field(default_factory=dict)  # alias -> the resource field of the cluster
    secrets: list[SecretRef] = field(default_factory=list)
    not_applicable: list[str] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    client_keys: list[ClientKey] = field(default_factory=list)  # every client key taken: librdkafka checks them

    def secret_names(self) -> list[str]:
        return sorted({s.secret for s in self.secrets})
