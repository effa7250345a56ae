"""A cluster's credentials as the job reads them, and when they change: rotation without a restart.

The job gets its secrets as files (mounted Secrets, which the kubelet replaces in place when a Secret changes,
a minute or two later: its sync period plus its cache's) or as environment variables. librdkafka reads them once,
when a client is made, and never again; the job's clients live long (a lane's between epochs, the driver's
services for the driver's life). So:
- `fingerprint(cluster)`: a hash of the contents of every file and variable the cluster's client config reads
  (CA files, globs included, the client certificate and key, the password's file or variable); never the secret.
- `CredentialWatch`: a holder of long-lived clients asks it on its own cadence and makes its clients again when
  the fingerprint changed (read it *before* reading the client config: a change in between costs one more
  renewal, never a client left on old credentials).
- `RefusalGrace`: a broker that re-authenticates sessions (KIP-368, `connections.max.reauth.ms`) refuses a
  client whose password changed on the broker before the new one reached the file, and the other way round.
  A refusal therefore ends the mirror only once the same credentials were refused for longer than the grace
  (`grace_seconds()`, default ROTATION_GRACE_S); new credentials start it again.
Shared by the job and the operator: imports nothing of the Spark side.
"""
from __future__ import annotations

import glob
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Sequence

from .resource.flowgroup import Cluster

ROTATION_GRACE_S = 120.0
"""How long refused credentials are waited on before the refusal ends the mirror: the kubelet's sync period
(60 s) plus its Secret cache's time to live (60 s), the longest a mounted Secret lags the Secret."""
GRACE_ENV = "SPARKMIRROR_CREDENTIALS_GRACE_SECONDS"
CHECK_EVERY_S = 5.0
"""How often a holder of clients reads the fingerprint again (a few small files)."""

Entry = tuple[str, str, bytes | None]
"""(kind, name, contents): kind `file`, `glob` (contents: the matching paths) or `env`; None: missing."""


def grace_seconds() -> float:
    """ROTATION_GRACE_S, or $SPARKMIRROR_CREDENTIALS_GRACE_SECONDS when set to a number of seconds >= 0."""
    try:
        value = float(os.environ.get(GRACE_ENV, ""))
    except ValueError:
        return ROTATION_GRACE_S
    return value if value >= 0 else ROTATION_GRACE_S


def references(cluster: Cluster) -> list[tuple[str, str]]:
    """(kind, name) of every file and variable the cluster's client config reads (`Cluster.client_config`)."""
    refs: list[tuple[str, str]] = []
    if cluster.tls is not None:
        refs += [("glob" if glob.has_magic(f) else "file", f) for f in cluster.tls.caFiles]
    auth = cluster.authentication
    if auth is not None:
        refs += [("file", f) for f in (auth.certificateFile, auth.keyFile) if f]
        if auth.password is not None:
            refs.append(("file", auth.password.file) if auth.password.file is not None
                        else ("env", auth.password.env or ""))
    return refs


def read(refs: Iterable[tuple[str, str]]) -> list[Entry]:
    """The references' contents now (a glob: the paths it matches, then each of them as a file)."""
    out: list[Entry] = []
    for kind, name in refs:
        if kind == "env":
            value = os.environ.get(name)
            out.append((kind, name, None if value is None else value.encode("utf-8", "surrogateescape")))
        elif kind == "glob":
            matches = sorted(glob.glob(name))
            out.append((kind, name, "\n".join(matches).encode("utf-8", "surrogateescape")))
            out += read(("file", m) for m in matches)
        else:
            try:
                out.append((kind, name, open(name, "rb").read()))
            except OSError:
                out.append((kind, name, None))
    return out


def digest(entries: Iterable[Entry]) -> str:
    """A hash of the entries (pure): equal exactly when every name and content is."""
    h = hashlib.sha256()
    for kind, name, data in entries:
        h.update(f"{kind}\0{name}\0".encode("utf-8", "surrogateescape"))
        h.update(b"-" if data is None else b"+%d\0" % len(data) + data)
    return h.hexdigest()


def fingerprint(cluster: Cluster) -> str:
    """The cluster's credentials now, as a hash (see the module doc)."""
    return digest(read(references(cluster)))


def fingerprints(clusters: Iterable[Cluster]) -> str:
    """One hash of several clusters' fingerprints (a lane's source and target, say)."""
    return hashlib.sha256("\0".join(f"{c.alias}={fingerprint(c)}" for c in clusters).encode()).hexdigest()


def conf_files_digest(conf: dict[str, str]) -> str:
    """A hash of the files a librdkafka config names by location (`ssl.*.location`): what two equal configs made
    at different times may still differ in (a certificate replaced in place)."""
    return digest(read(("file", v) for k, v in sorted(conf.items()) if k.startswith("ssl.") and
                       k.endswith(".location")))


SECRET_KEYS = frozenset({"sasl.password", "ssl.ca.pem", "ssl.certificate.pem", "ssl.key.pem", "ssl.key.password"})
"""librdkafka properties that hold secrets as text: a client config without them says which client it is."""


class CredentialWatch:
    """Whether the credentials of `clusters` changed since the last look (at most every `every` seconds)."""

    def __init__(self, clusters: Sequence[Cluster], every: float = CHECK_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.clusters, self.every, self.clock = list(clusters), every, clock
        self.current = fingerprints(self.clusters)
        self._next = clock() + every
        self.changed_at: float | None = None

    def changed(self) -> bool:
        """True once per change seen: the holder's clients are to be made again now."""
        now = self.clock()
        if now < self._next:
            return False
        self._next = now + self.every
        fp = fingerprints(self.clusters)
        if fp == self.current:
            return False
        self.current, self.changed_at = fp, now
        return True

    def names(self) -> str:
        return ", ".join(repr(c.alias) for c in self.clusters)


class RefusalGrace:
    """How long a cluster's refusal of the credentials is waited on (see the module doc)."""

    def __init__(self, grace: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace = grace_seconds() if grace is None else grace
        self.clock = clock
        self._since: dict[str, tuple[str, float]] = {}  # cluster alias -> (fingerprint refused, first refused)

    def refused(self, cluster: Cluster) -> float | None:
        """Note that `cluster` refused the credentials read now: the seconds they are still waited on, or None
        when they have been refused for longer than the grace (the refusal stands)."""
        return self.refused_as(cluster.alias, fingerprint(cluster))

    def refused_as(self, alias: str, fp: str = "") -> float | None:
        """As `refused`, for a holder that knows the cluster by its alias only (a lane's clients, made from the
        files as they were when made): the grace counts from the first refusal of credentials `fp`."""
        now = self.clock()
        seen = self._since.get(alias)
        if seen is None or seen[0] != fp:
            self._since[alias] = seen = (fp, now)
        left = self.grace - (now - seen[1])
        return left if left > 0 else None

    def accepted(self, alias: str) -> None:
        """The cluster took the credentials (or did not refuse them): a later refusal starts a new grace."""
        self._since.pop(alias, None)
