"""Resource files -> flow-group configs, with errors that name the file and the field. Pure but for reading."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..inputs import InputError, mapping_documents
from ..resource.autoscaling import AutoscalingSpec
from ..resource.flowgroup import FlowGroupConfig, SecretUnreadable


class InvalidResource(ValueError):
    """A resource file that does not validate; the message names the file and the field(s)."""


@dataclass
class Loaded:
    configs: list[FlowGroupConfig] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # cluster alias -> resource field holding its bootstrap servers, per flow group name
    fields: dict[str, dict[str, str]] = field(default_factory=dict)
    # spec.autoscaling when enabled, per flow group name (runner/autoscaler.py follows it)
    autoscaling: dict[str, AutoscalingSpec] = field(default_factory=dict)


def read_documents(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """(label, document) of every non-empty YAML document of a file; InvalidResource names the file (missing,
    a directory, not UTF-8, broken YAML, empty, a document that is not a mapping)."""
    try:
        return mapping_documents(path, "a KafkaMirrorMaker2 resource")
    except InputError as e:
        raise InvalidResource(str(e)) from None


def load(paths: list[str]) -> Loaded:
    """Every flow group of every KafkaMirrorMaker2 resource in `paths` (secrets from environment variables)."""
    from sparkmirror.clientcheck import check_client_keys
    from sparkmirror.resource.plan import plan
    from sparkmirror.resource.model import API_VERSION, KIND

    out = Loaded()
    problems = []
    for path in paths:
        for label, doc in read_documents(path):
            kind, api = doc.get("kind"), doc.get("apiVersion")
            if kind != KIND:
                problems.append(f"{label}: kind: expected {KIND!r}, got {kind!r}")
                continue
            if api != API_VERSION:
                problems.append(f"{label}: apiVersion: expected {API_VERSION!r}, got {api!r}")
                continue
            p = plan(doc, secrets="env")
            if not p.errors:
                check_client_keys(p)  # librdkafka's own word on each client setting, before anything runs
            if p.errors:
                problems += [f"{label}: {e}" for e in p.errors]
                continue
            out.warnings += [f"{label}: {w}: not applicable to sparkmirror, ignored" for w in p.not_applicable]
            out.warnings += [f"{label}: {w}" for w in p.unsupported]
            fields = {alias: f"{where}.bootstrapServers" for alias, where in p.cluster_fields.items()}
            for cfg in p.groups:
                # no Kubernetes here: no Lease decides which worker generation mirrors
                cfg = cfg.model_copy(update={"worker": cfg.worker.model_copy(update={"leaseName": None,
                                                                                    "leaseNamespace": None})})
                out.configs.append(cfg)
                out.fields[cfg.name] = fields
                scaling = p.resource.spec.autoscaling if p.resource is not None else None
                if scaling is not None and scaling.enabled:
                    out.autoscaling[cfg.name] = scaling
    names = [c.name for c in out.configs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"flow group names {dupes} occur in more than one resource; they name transactional ids, "
                        "so they must be unique")
    if problems:
        raise InvalidResource("\n".join(problems))
    return out


class ResourceWatch:
    """Notices when the resource files change (content, not mtime), so a running mirror can hand over to them."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = list(paths)
        self.seen = self._digest()

    def _digest(self) -> str:
        import hashlib

        h = hashlib.sha256()
        for p in self.paths:
            try:
                h.update(Path(p).read_bytes())
            except OSError as e:
                h.update(f"unreadable: {e}".encode())
        return h.hexdigest()

    def changed(self) -> Loaded | None:
        """The files' new flow groups once they changed (None: unchanged). InvalidResource when the change does
        not validate; it is reported once, and the running mirror carries on with what it runs."""
        now = self._digest()
        if now == self.seen:
            return None
        self.seen = now
        return load(self.paths)


def secret_problems(loaded: Loaded) -> list[str]:
    """Every secret the clusters need, read once before Spark starts: an unset variable, a missing file or a
    value that is not UTF-8 text, each naming the cluster's resource field (never the value)."""
    problems = [p for cfg in loaded.configs for p in config_secret_problems(cfg, loaded.fields.get(cfg.name, {}))]
    return list(dict.fromkeys(problems))


def load_reporting(paths: list[str], err: Callable[[str], None]) -> Loaded | None:
    """`load`, for a command: each problem of a file that does not validate, and each secret the clusters need
    but cannot be read, goes to `err` as one line; None then (the command exits 2)."""
    try:
        loaded = load(paths)
    except InvalidResource as e:
        for problem in str(e).splitlines():  # one line per problem, each naming the file and the field
            err(problem)
        return None
    return loaded


def secrets_reported(loaded: Loaded, err: Callable[[str], None]) -> bool:
    """True when a secret of the clusters cannot be read; each such problem went to `err`."""
    problems = secret_problems(loaded)
    for problem in problems:
        err(problem)
    return bool(problems)


def config_secret_problems(cfg: FlowGroupConfig, fields: dict[str, str] | None = None) -> list[str]:
    """`secret_problems` of one flow group; `fields` maps a cluster alias to its resource field (else
    `clusters[<alias>]`, the flow-group config's own)."""
    problems = []
    for c in cfg.clusters:
        where = (fields or {}).get(c.alias, f"clusters[{c.alias}]").removesuffix(".bootstrapServers")
        try:
            c.client_config()
        except KeyError as e:
            problems.append(f"{where}: cluster {c.alias!r}: {e.args[0]}")
        except (OSError, SecretUnreadable) as e:
            problems.append(f"{where}: cluster {c.alias!r}: {e}")
    return problems
