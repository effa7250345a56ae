"""Secured listeners for the fault campaign (`python -m bench.chaos --security sasl_ssl | mtls | SOURCE:TARGET`).

Each cluster opens its listener (one for both, or `sasl_ssl:mtls`: the mirror reads the source with SCRAM and
writes the target with its client certificate, one campaign for both kinds) on every node with certificates from one CA and the authorizer on; the mirror's
principal is granted what it needs and nothing makes it a super user, so an authorizer still loading after a broker
restart, a TLS handshake with a node coming up or a SCRAM exchange cut by a kill meet the mirror as they would in
production. The mirror reads its credentials from files laid out as the kubelet mounts a Secret, and a `rotation`
fault replaces them while it runs: a new SCRAM password (the brokers first, then the file, as a Secret synced
late) or a new client certificate and key. The harness itself (load, progress, counting) keeps to PLAINTEXT, the
nodes' admin door."""
from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from sparkmirror_dev.certs import CertificateAuthority
from sparkmirror_dev.kafka import ReplicatedKafkaCluster, Security
from sparkmirror_dev.mountedsecret import MountedSecret

from .chaosmodel import LISTENERS, listener_kinds

USER = "mirror"


class SecuredGround:
    """The CA, the mirror's credentials as a mounted Secret (what both clusters' listeners need of it), its cluster
    entries, and their rotation."""

    def __init__(self, security: str, workdir: Path) -> None:
        self.kinds = listener_kinds(security)
        if "none" in self.kinds.values():
            raise ValueError("--security none needs no secured ground")
        self.ca = CertificateAuthority(workdir / "ca")
        self.generation = 1
        self.secret: MountedSecret | None = None
        self.secret_dir = workdir / "secret"

    @staticmethod
    def principal(kind: str) -> str:
        """The name the brokers' authorizer knows the mirror by (the certificate's subject under mTLS)."""
        return f"User:{USER}" if kind == "sasl_ssl" else f"User:CN={USER}"

    def security(self, role: str) -> Security:
        kind = self.kinds[role]
        return Security(self.ca, listeners=(LISTENERS[kind],), authorizer=True,
                        scram_users={USER: self._password()} if kind == "sasl_ssl" else {})

    def _password(self) -> str:
        return f"chaos-pw-{self.generation}"

    def _files(self) -> dict[str, bytes]:
        files = {"ca.crt": self.ca.cert.read_bytes()}
        if "sasl_ssl" in self.kinds.values():
            files["password"] = self._password().encode()
        if "mtls" in self.kinds.values():
            issued = self.ca.issue(f"client-gen{self.generation}", USER, client=True)  # same subject, new key
            files |= {"tls.crt": issued.cert.read_bytes(), "tls.key": issued.key.read_bytes()}
        return files

    def start(self, clusters: dict[str, ReplicatedKafkaCluster]) -> None:
        """After the clusters started (role -> cluster): the mirror's grants on each, and its Secret mounted."""
        for role, c in clusters.items():
            c.nodes[0].allow(self.principal(self.kinds[role]))
        self.secret = MountedSecret(self.secret_dir, self._files())

    def entry(self, alias: str, cluster: ReplicatedKafkaCluster, role: str) -> dict:
        """The cluster as the mirror's configuration names it: its secured listener, credentials from the Secret."""
        assert self.secret is not None, "start() first"
        kind = self.kinds[role]
        auth = ({"type": "scram-sha-512", "username": USER, "password": {"file": self.secret.path("password")}}
                if kind == "sasl_ssl" else {"type": "tls", "certificateFile": self.secret.path("tls.crt"),
                                            "keyFile": self.secret.path("tls.key")})
        return {"alias": alias, "bootstrapServers": cluster.bootstrap_of(LISTENERS[kind]),
                "tls": {"caFiles": [self.secret.path("ca.crt")]}, "authentication": auth}

    def rotate(self, clusters: dict[str, ReplicatedKafkaCluster]) -> str:
        """Replace the mirror's credentials while it runs (a new password on the SCRAM clusters first, then the
        Secret); returns what was replaced."""
        assert self.secret is not None, "start() first"
        self.generation += 1
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
        for role, c in clusters.items():
            if self.kinds[role] == "sasl_ssl":
                admin = AdminClient({"bootstrap.servers": c.bootstrap})
                upsert = UserScramCredentialUpsertion(USER, info, self._password().encode())
                for fut in admin.alter_user_scram_credentials([upsert]).values():
                    fut.result(60)
        self.secret.update(self._files())
        what = [w for k, w in (("sasl_ssl", "password"), ("mtls", "certificate")) if k in self.kinds.values()]
        return f"{' and '.join(what)} gen {self.generation}"
