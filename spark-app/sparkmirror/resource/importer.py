"""`sparkmirror import`: Strimzi KafkaMirrorMaker2 manifests (v1, v1beta2) and MM2 `mm2.properties` files to
sparkmirror resources, saying what could not be carried over. Pure: text in, (resources, notes) out.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from .documents import InputError, kind_of, mapping_documents_of
from .plan import plan
from .model import API_VERSION, KIND

STRIMZI_GROUP = "kafka.strimzi.io"


@dataclass
class Imported:
    resources: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be carried over, and why

    def to_yaml(self) -> str:
        return yaml.safe_dump_all(self.resources, sort_keys=False)


def import_text(text: str, *, name: str | None = None, namespace: str | None = None,
                label: str = "input") -> Imported:
    """Detect the format (YAML manifest or Java properties) and convert. InputError (naming `label`, the
    document and the field) for YAML that is broken or not shaped like a manifest."""
    stripped = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith(("#", "!"))]
    if not stripped:
        raise InputError(f"{label}: empty: expected a KafkaMirrorMaker2 manifest or an mm2.properties file")
    looks_yaml = any(ln.startswith(("apiVersion:", "kind:", "---", "- ", "[", "{")) for ln in stripped)
    out = import_manifests(text, label) if looks_yaml else import_mm2_properties(text, name=name or "mirror")
    for r in out.resources:
        if name and looks_yaml:
            r["metadata"]["name"] = name
        if namespace:
            r["metadata"]["namespace"] = namespace
    _check(out)
    return out


def _check(out: Imported) -> None:
    """Everything the converted resource still says that sparkmirror will not use."""
    for r in out.resources:
        p = plan(r)
        who = r["metadata"]["name"]
        out.notes += [f"{who}: {f}: Kafka Connect only, accepted but not applicable" for f in p.not_applicable]
        out.notes += [f"{who}: {f}: not supported by sparkmirror (reported on the status)" for f in p.unsupported]
        out.notes += [f"{who}: error: {e}" for e in p.errors]


# ---- Strimzi manifests ----------------------------------------------------------------------------------

def _mapping(value: Any, where: str) -> dict[str, Any]:
    """A manifest part that must be a mapping (absent: empty), or InputError naming it."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a mapping, got {kind_of(value)}")
    return value


def _mappings(value: Any, where: str) -> list[dict[str, Any]]:
    """A manifest part that must be a list of mappings (absent: empty), or InputError naming the item."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise InputError(f"{where}: expected a list, got {kind_of(value)}")
    return [_mapping(v, f"{where}[{i}]") for i, v in enumerate(value)]


def import_manifests(text: str, label: str = "input") -> Imported:
    out = Imported()
    for where, doc in mapping_documents_of(text, label, "a Kubernetes manifest"):
        api, kind = str(doc.get("apiVersion", "")), doc.get("kind")
        if kind != "KafkaMirrorMaker2":
            out.notes.append(f"skipped {kind or 'a document without kind'} ({api}): not a KafkaMirrorMaker2")
            continue
        meta = _mapping(doc.get("metadata"), f"{where}: metadata")
        if api == f"{STRIMZI_GROUP}/v1beta2":
            out.resources.append(_from_v1beta2(doc, out.notes, where))
        elif api in (f"{STRIMZI_GROUP}/v1", API_VERSION):
            out.resources.append(_resource(meta, copy.deepcopy(doc.get("spec") or {})))
        else:
            out.notes.append(f"skipped KafkaMirrorMaker2 of apiVersion {api!r}: only kafka.strimzi.io/v1 and "
                             "v1beta2 are converted")
    return out


def _resource(meta: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    m = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k)}
    m.setdefault("name", "mirror")
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": m, "spec": spec}


_V1BETA2_RENAMED = {"topicsBlacklistPattern": "topicsExcludePattern", "groupsBlacklistPattern": "groupsExcludePattern"}
_V1_TOP = {"version", "replicas", "image", "resources", "livenessProbe", "readinessProbe", "jvmOptions", "jmxOptions",
           "logging", "clientRackInitImage", "rack", "metricsConfig", "tracing", "template"}
_CONNECT_KEYS_V1 = {"group.id": "groupId", "config.storage.topic": "configStorageTopic",
                    "offset.storage.topic": "offsetStorageTopic", "status.storage.topic": "statusStorageTopic"}


def _from_v1beta2(doc: dict[str, Any], notes: list[str], where: str = "input") -> dict[str, Any]:
    spec_in = _mapping(doc.get("spec"), f"{where}: spec")
    who = (doc.get("metadata") or {}).get("name", "mirror")
    clusters = {c.get("alias"): copy.deepcopy(c) for c in _mappings(spec_in.get("clusters"),
                                                                     f"{where}: spec.clusters")}
    mirrors_in = _mappings(spec_in.get("mirrors"), f"{where}: spec.mirrors")
    target_alias = spec_in.get("connectCluster")
    if target_alias not in clusters:
        targets = {m.get("targetCluster") for m in mirrors_in}
        target_alias = next(iter(targets)) if len(targets) == 1 else None
    spec: dict[str, Any] = {k: copy.deepcopy(v) for k, v in spec_in.items() if k in _V1_TOP}
    target = clusters.get(target_alias) or {"alias": target_alias or "target", "bootstrapServers": ""}
    tconf = _mapping(target.get("config"), f"{where}: spec.clusters[alias={target_alias}].config")
    for key, fld in _CONNECT_KEYS_V1.items():  # v1 has these as fields of the target
        if key in tconf:
            target[fld] = str(tconf.pop(key))
    spec["target"] = target
    mirrors = []
    for i, m in enumerate(mirrors_in):
        if m.get("targetCluster") != target_alias:
            notes.append(f"{who}: spec.mirrors[{i}]: targets {m.get('targetCluster')!r}, not the Connect cluster "
                         f"{target_alias!r}; not carried over (one target per resource)")
            continue
        src = clusters.get(m.get("sourceCluster"))
        if src is None:
            notes.append(f"{who}: spec.mirrors[{i}]: unknown sourceCluster {m.get('sourceCluster')!r}; skipped")
            continue
        out: dict[str, Any] = {"source": copy.deepcopy(src)}
        for k in ("sourceConnector", "checkpointConnector", "topicsPattern", "topicsExcludePattern", "groupsPattern",
                  "groupsExcludePattern"):
            if k in m:
                out[k] = copy.deepcopy(m[k])
        for old, new in _V1BETA2_RENAMED.items():
            if old in m and new not in out:
                out[new] = m[old]
        hb = _mapping(m.get("heartbeatConnector"), f"{where}: spec.mirrors[{i}].heartbeatConnector")
        if hb:
            hb_in = _mapping(hb.get("config"), f"{where}: spec.mirrors[{i}].heartbeatConnector.config")
            hb_conf = {k: v for k, v in hb_in.items()
                       if str(k).startswith("emit.heartbeats.") or k == "heartbeats.topic.replication.factor"}
            if hb_conf:
                where_sc = f"{where}: spec.mirrors[{i}].sourceConnector"
                sc = out["sourceConnector"] = _mapping(out.get("sourceConnector"), where_sc)
                sc["config"] = {**_mapping(sc.get("config"), f"{where_sc}.config"), **hb_conf}
            dropped = sorted(map(str, set(hb_in) - set(hb_conf))) + sorted(map(str, set(hb) - {"config"}))
            notes.append(f"{who}: spec.mirrors[{i}].heartbeatConnector: emit.heartbeats.* and "
                         "heartbeats.topic.replication.factor moved to sourceConnector"
                         + (f"; not carried over: {', '.join(dropped)}" if dropped else ""))
        mirrors.append(out)
    spec["mirrors"] = mirrors
    for k in sorted(set(spec_in) - _V1_TOP - {"clusters", "connectCluster", "mirrors"}):
        notes.append(f"{who}: spec.{k}: not carried over (not part of KafkaMirrorMaker2 v1)")
    return _resource(doc.get("metadata") or {}, spec)


# ---- mm2.properties -------------------------------------------------------------------------------------

def parse_properties(text: str) -> dict[str, str]:
    """Java .properties: `key=value`, `key: value` or `key value`, comments, line continuations."""
    props: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        line = line.strip()
        while line.endswith("\\") and not line.endswith("\\\\"):
            line = line[:-1] + next(lines, "").strip()
        if not line or line.startswith(("#", "!")):
            continue
        m = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$", line)
        if m:
            props[m.group(1).replace("\\", "")] = m.group(2)
        else:
            props[line] = ""
    return props


_SECRET_KEY_PARTS = ("password", "jaas.config", "secret", "ssl.keystore.key", "ssl.keystore.certificate.chain",
                     "ssl.truststore.certificates")
_TLS_HINTS = ("security.protocol", "ssl.", "sasl.")


def _is_credential(key: str) -> bool:
    """A client property whose value is a credential (also behind consumer./producer./admin. prefixes)."""
    return any(part in key for part in _SECRET_KEY_PARTS)


def _credential_note(key: str) -> str:
    return (f"{key}: a credential; not carried over: put it in a Secret and reference it from "
            "authentication.passwordSecret / certificateAndKey")


def import_mm2_properties(text: str, *, name: str = "mirror") -> Imported:
    """One resource per target cluster of the enabled `A->B` flows."""
    props = parse_properties(text)
    out = Imported()
    aliases = [a.strip() for a in props.get("clusters", "").split(",") if a.strip()]
    flows = [(a, b) for a in aliases for b in aliases
             if a != b and props.get(f"{a}->{b}.enabled", "false").strip().lower() == "true"]
    if not aliases:  # a scalar or stray text lands here too: say what was looked for
        out.notes.append("neither a KafkaMirrorMaker2 manifest (YAML with apiVersion and kind) nor an "
                         "mm2.properties file (no 'clusters' key)")
        return out
    if not flows:
        out.notes.append("no enabled flow (A->B.enabled = true) among clusters " + ", ".join(aliases))
        return out
    used: set[str] = {"clusters"}

    def cluster(alias: str) -> dict[str, Any]:
        c: dict[str, Any] = {"alias": alias, "bootstrapServers": props.get(f"{alias}.bootstrap.servers", "")}
        used.add(f"{alias}.bootstrap.servers")
        conf = {}
        for k, v in props.items():
            if not k.startswith(f"{alias}.") or "->" in k or k == f"{alias}.bootstrap.servers":
                continue
            sub = k[len(alias) + 1:]
            used.add(k)
            if _is_credential(sub):
                out.notes.append(_credential_note(k))
            elif sub.startswith(_TLS_HINTS):  # no value in the note: an ssl./sasl. value may be key material
                out.notes.append(f"{k}: security settings are not carried over: set tls/authentication")
            else:
                conf[sub] = v
        if conf:
            c["config"] = conf
        return c

    targets = sorted({b for _, b in flows})
    for target in targets:
        spec: dict[str, Any] = {"target": cluster(target), "mirrors": []}
        for a, b in flows:
            if b != target:
                continue
            used.add(f"{a}->{b}.enabled")
            config: dict[str, str] = {}
            mirror: dict[str, Any] = {"source": cluster(a)}
            for k, v in props.items():  # global mirror keys, then A->B keys override
                if k in used or "->" in k or k.split(".", 1)[0] in aliases:
                    continue
                if _is_credential(k):
                    if _credential_note(k) not in out.notes:
                        out.notes.append(_credential_note(k))
                    continue
                config[k] = v
            prefix = f"{a}->{b}."
            for k, v in props.items():
                if k.startswith(prefix) and k != f"{a}->{b}.enabled":
                    used.add(k)
                    if _is_credential(k):
                        out.notes.append(_credential_note(k))
                        continue
                    config[k[len(prefix):]] = v
            for key, fld in (("topics", "topicsPattern"), ("topics.exclude", "topicsExcludePattern"),
                             ("groups", "groupsPattern"), ("groups.exclude", "groupsExcludePattern")):
                if key in config:
                    mirror[fld] = config.pop(key)
            if config:
                mirror["sourceConnector"] = {"config": config}
            spec["mirrors"].append(mirror)
        res_name = name if len(targets) == 1 else f"{name}-{re.sub('[^a-z0-9-]', '-', target.lower())}"
        out.resources.append(_resource({"name": res_name}, spec))
    for k in props:
        if "->" in k and k not in used and not k.endswith(".enabled"):
            out.notes.append(f"{k}: flow not enabled; not carried over")
    return out
