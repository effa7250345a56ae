"""From a KafkaMirrorMaker2 resource to the flow-group configs the job reads: pure, no I/O.

`plan(resource)` validates the resource, maps the MM2 config keys that mean something here onto the job's
config model, and collects what cannot be carried over: Connect-only fields and keys (`not_applicable`), MM2
keys or values sparkmirror does not implement (`unsupported`), and errors naming the field (`errors`).

Credentials are never values: a Secret key becomes either a file path under a mount root (`secrets="files"`,
what the SparkApplication mounts) or the name of an environment variable (`secrets="env"`, for local runs).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

from pydantic import ValidationError

from .clientconf import BATCHES_WHY, ClientKeys, batch_honours, cluster_prefix, recompresses
from .flowgroup import (
    Authentication,
    Cluster,
    CopyPath,
    Delivery,
    FlowGroupConfig,
    Mirror,
    SecretValue,
    Tls,
    Worker,
)

from .javaregex import JavaPatternError, compile_java
from .mm2keys import (CLUSTER_KEYS_NOT_APPLICABLE_PREFIXES, connector_config, mm2_list_regex, take_client_key,
                      with_admin)
from .planresult import Plan, Problem, ResourceInvalid, SecretRef
from .names import lease_name
from .clusters import PLAINTEXT_CREDENTIALS_MESSAGE, ClusterSpec
from .model import KafkaMirrorMaker2
from .schemabase import connect_only_fields

SECRET_MOUNT_ROOT = "/etc/sparkmirror/secrets"






def _check_regex(pattern: str | None, where: str, out: Plan) -> None:
    if pattern is None:
        return
    try:
        compile_java(pattern)
    except JavaPatternError as e:
        out.errors.append(Problem(where, f"invalid regular expression {e}"))


# ---- clusters and secrets -------------------------------------------------------------------------------

def env_name(secret: str, key: str) -> str:
    """The environment variable a local run reads a Secret key from: SPARKMIRROR_SECRET_<SECRET>_<KEY>."""
    return "SPARKMIRROR_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", f"{secret}_{key}").upper()


def secret_file(secret: str, key: str, root: str = SECRET_MOUNT_ROOT) -> str:
    return f"{root.rstrip('/')}/{secret}/{key}"


@dataclass
class _Secrets:
    mode: str
    root: str
    secret_keys: Callable[[str], list[str] | None] | None
    refs: list[SecretRef]
    field: str = ""

    def file(self, secret: str, key: str) -> str:
        self.refs.append(SecretRef(secret, key, field=self.field))
        return secret_file(secret, key, self.root)

    def value(self, secret: str, key: str) -> SecretValue:
        self.refs.append(SecretRef(secret, key, field=self.field))
        if self.mode == "env":
            return SecretValue(env=env_name(secret, key))
        return SecretValue(file=secret_file(secret, key, self.root))

    def pattern_files(self, secret: str, pattern: str) -> list[str]:
        keys = self.secret_keys(secret) if self.secret_keys else None
        if keys is None:  # keys unknown (no cluster to ask): the job expands the glob at run time
            self.refs.append(SecretRef(secret, None, pattern, field=self.field))
            return [secret_file(secret, pattern, self.root)]
        matched = sorted(k for k in keys if fnmatch(k, pattern))
        return [self.file(secret, k) for k in matched]


def _cluster(spec: ClusterSpec, path: str, secrets: _Secrets, out: Plan, exactly_once: bool = True,
             keys: ClientKeys | None = None) -> Cluster:
    tls = None
    if spec.tls is not None:
        ca: list[str] = []
        for i, c in enumerate(spec.tls.trustedCertificates):
            secrets.field = f"{path}.tls.trustedCertificates[{i}]"
            ca += secrets.pattern_files(c.secretName, c.pattern) if c.pattern else \
                [secrets.file(c.secretName, c.certificate or "")]
        tls = Tls(caFiles=ca)
    auth = None
    a = spec.authentication
    if a is not None:
        if a.type == "custom":
            out.unsupported.append(f"{path}.authentication.type=custom")
            out.errors.append(Problem(f"{path}.authentication.type", "custom authentication is not supported"))
        elif a.type == "tls":
            if a.certificateAndKey is None:
                out.errors.append(Problem(f"{path}.authentication.certificateAndKey", "required for type tls"))
            else:
                ck = a.certificateAndKey
                secrets.field = f"{path}.authentication.certificateAndKey"
                auth = Authentication(type="tls", certificateFile=secrets.file(ck.secretName, ck.certificate),
                                      keyFile=secrets.file(ck.secretName, ck.key))
        else:
            if a.passwordSecret is None or a.username is None:
                out.errors.append(Problem(f"{path}.authentication.passwordSecret",
                                          f"username and passwordSecret are required for type {a.type}"))
            else:
                if spec.tls is None and not a.allowPlaintextCredentials:
                    out.errors.append(Problem(f"{path}.authentication", PLAINTEXT_CREDENTIALS_MESSAGE))
                secrets.field = f"{path}.authentication.passwordSecret"
                auth = Authentication(type=a.type, username=a.username,
                                      password=secrets.value(a.passwordSecret.secretName,
                                                             a.passwordSecret.password))
    keys = keys if keys is not None else ClientKeys()
    general: dict[str, tuple[str, str]] = {}
    for key, raw in spec.config.items():
        where = f"{path}.config[{key}]"
        prefixed = cluster_prefix(key)
        if prefixed is not None:  # `consumer.*`, `producer.*`, `admin.*`: that client of this cluster
            client, sub = prefixed
            take_client_key(client, sub, raw, where, exactly_once, getattr(keys, client), out)
        elif key.startswith(CLUSTER_KEYS_NOT_APPLICABLE_PREFIXES):
            out.not_applicable.append(where)
        else:
            take_client_key("any", key, raw, where, exactly_once, general, out)
    # librdkafka has no admin-only settings: admin keys are the cluster's connection settings
    for name, (value, where) in keys.admin.items():
        take_client_key("admin", name, value, where, exactly_once, general, out, record=False)
    return Cluster(alias=spec.alias, bootstrapServers=spec.bootstrapServers, tls=tls, authentication=auth,
                   config={k: v for k, (v, _) in general.items()}, consumer=keys.values("consumer"),
                   producer=keys.values("producer"))


def _and_pattern(outer: str | None, inner: str | None) -> str | None:
    """Topics matching both regexes (the group's and the mirror's), as one regex."""
    if outer is None:
        return inner
    if inner is None:
        return outer
    return f"(?=(?:{outer})$)(?:{inner})"


def _or_pattern(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a if b is None else b
    return f"(?:{a})|(?:{b})"


def records_fallback(fields: list[str]) -> str:
    """Why a flow group that left `copy` unset copies records (copypath.py reports it)."""
    return (f"{', '.join(fields)} {'is' if len(fields) == 1 else 'are'} honoured by the record path only, so "
            "this flow group copies records; copy: batches would refuse them, copy: records says so")


def default_group_name(alias: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", alias.lower()).strip("-")[:30].strip("-")
    return name or "mirror"


# ---- the conversion -------------------------------------------------------------------------------------

def parse(resource: dict[str, Any]) -> KafkaMirrorMaker2:
    """Validate a resource dict (status and unknown metadata ignored) against the model."""
    body = {k: v for k, v in resource.items() if k in ("apiVersion", "kind", "metadata", "spec")}
    meta = body.get("metadata") or {}
    if isinstance(meta, dict):  # anything else is left for the model to refuse, naming the field
        body["metadata"] = {k: meta[k] for k in ("name", "namespace", "uid", "generation", "labels", "annotations")
                            if k in meta and meta[k] is not None}
    return KafkaMirrorMaker2.model_validate(body)


def validation_problems(e: ValidationError) -> list[Problem]:
    out = []
    for err in e.errors():
        loc = ""
        for part in err["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
        out.append(Problem(loc or "resource", err["msg"]))
    return out


def plan(resource: dict[str, Any] | KafkaMirrorMaker2, *, secrets: str = "files",
         secret_root: str | None = None,
         secret_keys: Callable[[str], list[str] | None] | None = None) -> Plan:
    """Everything the resource means for the job, and everything it says that cannot be carried over.

    secrets: "files" (paths under secret_root, default the mount root the SparkApplication uses) or "env"
    (environment variable names, see `env_name`; certificate files then live under secret_root, default
    ./secrets). secret_keys(secret) may list a Secret's keys so certificate patterns resolve to files.
    """
    if secrets not in ("files", "env"):
        raise ValueError(f"secrets must be 'files' or 'env', not {secrets!r}")
    try:
        kmm2 = resource if isinstance(resource, KafkaMirrorMaker2) else parse(resource)
    except ValidationError as e:
        return Plan(resource=None, errors=validation_problems(e))
    out = Plan(resource=kmm2)
    spec = kmm2.spec
    out.not_applicable += connect_only_fields(spec)
    sec = _Secrets(secrets, secret_root or (SECRET_MOUNT_ROOT if secrets == "files" else "./secrets"),
                   secret_keys, out.secrets)

    aliases = [m.source.alias for m in spec.mirrors]
    if len(set(aliases)) != len(aliases):
        out.errors.append(Problem("spec.mirrors", "mirrors[].source.alias must be unique"))
    if spec.upgrade.handoffTimeoutSeconds <= spec.spark.epochSeconds:
        out.errors.append(Problem("spec.upgrade.handoffTimeoutSeconds", "must be longer than spec.spark.epochSeconds "
                                  "(a new generation commits first at the end of its first epoch)"))
    if spec.progressTopicReplicationFactor == 0:
        out.errors.append(Problem("spec.progressTopicReplicationFactor", "must be -1 (the broker's default) or at "
                                  "least 1, got 0"))
    exactly_once = spec.delivery == Delivery.EXACTLY_ONCE
    target_keys = ClientKeys()
    target = _cluster(spec.target, "spec.target", sec, out, exactly_once, target_keys)
    out.cluster_fields[spec.target.alias] = "spec.target"
    lane_client_fields: dict[str, list[str]] = {}  # source alias -> fields of its lanes' per-client keys

    mirrors: dict[str, tuple[Mirror, Cluster]] = {}
    for i, m in enumerate(spec.mirrors):
        path = f"spec.mirrors[{i}]"
        errors_before = len(out.errors)
        if m.source.alias == spec.target.alias:
            out.errors.append(Problem(f"{path}.source.alias", "must differ from spec.target.alias"))
        for attr in ("topicsPattern", "topicsExcludePattern", "groupsPattern", "groupsExcludePattern"):
            _check_regex(getattr(m, attr), f"{path}.{attr}", out)
        source_keys = ClientKeys()
        source = _cluster(m.source, f"{path}.source", sec, out, exactly_once, source_keys)
        out.cluster_fields.setdefault(m.source.alias, f"{path}.source")
        sides = {"source": ClientKeys(), "target": ClientKeys()}
        fields = connector_config(m, path, out, exactly_once, sides)
        fields["sourceConsumer"] = sides["source"].values("consumer")
        fields["targetProducer"] = sides["target"].values("producer")
        lane_client_fields[m.source.alias] = (source_keys.fields("consumer") + sides["source"].fields("consumer")
                                              + sides["target"].fields("producer"))
        source = with_admin(source, sides["source"], out)
        target = with_admin(target, sides["target"], out)
        if m.topicsPattern is not None:
            fields["topics"] = mm2_list_regex(m.topicsPattern)
        if m.topicsExcludePattern is not None:
            fields["topicsExclude"] = mm2_list_regex(m.topicsExcludePattern)
        if m.groupsPattern is not None:
            fields["groups"] = mm2_list_regex(m.groupsPattern)
        if m.groupsExcludePattern is not None:
            fields["groupsExclude"] = mm2_list_regex(m.groupsExcludePattern)
        if m.startFrom is not None:
            fields["startFrom"] = m.startFrom
        if m.sourceOffsetsGroup is not None:
            fields["sourceOffsetsGroup"] = m.sourceOffsetsGroup
        if m.deleteRemoteTopics is not None:
            fields["deleteRemoteTopics"] = m.deleteRemoteTopics
        if m.transforms:
            fields["transforms"] = m.transforms
        if len(out.errors) > errors_before:
            continue
        try:
            mirror = Mirror(name=m.source.alias, source=m.source.alias, target=spec.target.alias, **fields)
        except ValidationError as e:
            out.errors += [Problem(f"{path}.{p.field}", p.message) for p in validation_problems(e)]
            continue
        mirrors[m.source.alias] = (mirror, source)

    if spec.failover is not None:
        _check_regex(spec.failover.groupsPattern, "spec.failover.groupsPattern", out)
        for a in spec.failover.mirrors:
            if a not in aliases:
                out.errors.append(Problem("spec.failover.mirrors", f"no mirror has source alias {a!r}"))

    # flow groups: the declared ones, then one per mirror no group names
    groups: list[tuple[str, str, list[str], Any]] = []
    claimed: set[str] = set()
    for j, g in enumerate(spec.flowGroups or []):
        path = f"spec.flowGroups[{j}]"
        for a in g.mirrors:
            if a not in aliases:
                out.errors.append(Problem(f"{path}.mirrors", f"no mirror has source alias {a!r}"))
        _check_regex(g.topicsPattern, f"{path}.topicsPattern", out)
        _check_regex(g.topicsExcludePattern, f"{path}.topicsExcludePattern", out)
        claimed.update(g.mirrors)
        groups.append((g.name, path, list(g.mirrors), g))
    for a in aliases:
        if a not in claimed:
            groups.append((default_group_name(a), f"spec.mirrors[source.alias={a}]", [a], None))
    # per-client keys do nothing on the batch path: refused by name where batches were asked for; where `copy` was
    # left to its default, the group copies records instead, saying why (a resource that worked before batches
    # became the default keeps working)
    copy_of: dict[str, tuple[CopyPath, str]] = {}
    recompress = [f"spec.target.config[{k}]" for k in spec.target.config if recompresses(k)]
    for name, path, members, g in groups:
        asked = g.copy_path if g is not None and g.copy_path is not None else spec.copy_path
        records_only = [where for where in dict.fromkeys(target_keys.fields("producer") + recompress +
                                                         [w for a in members for w in lane_client_fields.get(a, [])])
                        if not batch_honours(where)]
        if asked == CopyPath.BATCHES:
            out.errors += [Problem(where, BATCHES_WHY) for where in records_only]
        if asked is None and records_only:
            copy_of[name] = (CopyPath.RECORDS, records_fallback(records_only))
        else:
            copy_of[name] = (asked or CopyPath.BATCHES, "")
    seen: set[str] = set()
    for name, path, _, _ in groups:
        if name in seen:
            out.errors.append(Problem(path, f"flow group name {name!r} is used twice (mirrors no group names "
                                            "get a group named after their source alias)"))
        seen.add(name)
    if out.errors:
        return out

    for name, _path, members, g in groups:
        group_mirrors = []
        clusters = [target]
        for a in members:
            mirror, source = mirrors[a]
            if g is not None and (g.topicsPattern or g.topicsExcludePattern):
                mirror = mirror.model_copy(update={
                    "topics": _and_pattern(g.topicsPattern, mirror.topics),
                    "topicsExclude": _or_pattern(g.topicsExcludePattern, mirror.topicsExclude)})
            if g is not None and g.parallelism:
                mirror = mirror.model_copy(update={"lanes": g.parallelism})
            group_mirrors.append(mirror)
            if all(c.alias != source.alias for c in clusters):
                clusters.append(source)
        checkpoint = spec.spark.checkpointDir
        cfg = FlowGroupConfig(
            name=name,
            resource=f"{kmm2.namespace}/{kmm2.name}",
            resourceUid=kmm2.metadata.uid or "",
            clusters=clusters,
            mirrors=group_mirrors,
            delivery=spec.delivery,
            copy=copy_of[name][0],
            copyFallback=copy_of[name][1] or None,
            lanes=spec.spark.parallelism,
            epochSeconds=spec.spark.epochSeconds,
            commitIntervalMs=spec.spark.commitIntervalMs,
            lingerMs=spec.spark.lingerMs,
            offsetHistory=spec.spark.offsetHistory,
            progressTopic=spec.progressTopic,
            progressTopicReplicationFactor=spec.progressTopicReplicationFactor,
            metricsPerPartition=g.metricsPerPartition if g is not None else None,
            checkpointDir=f"{checkpoint.rstrip('/')}/{kmm2.namespace}/{kmm2.name}/{name}" if checkpoint else None,
            worker=Worker(generation=1, version=spec.version or "unversioned",
                          leaseName=lease_name(kmm2.name, name), leaseNamespace=kmm2.namespace),
        )
        out.groups.append(cfg)
        out.group_mirrors[name] = list(members)
    return out


def flow_group_configs(resource: dict[str, Any], *, secrets: str = "files",
                       secret_root: str | None = None) -> list[FlowGroupConfig]:
    """One FlowGroupConfig per flow group of a KafkaMirrorMaker2 resource (default one group per mirror).

    Raises ResourceInvalid (a ValueError) naming the fields when the resource cannot run. What is accepted but
    not carried over (Connect-only fields, unsupported MM2 keys) is in `plan(resource)`.
    """
    p = plan(resource, secrets=secrets, secret_root=secret_root)
    if p.errors:
        raise ResourceInvalid(p.errors)
    return p.groups
