"""Secured listeners for the fault campaign (`python -m bench.chaos --security sasl_ssl | mtls`).

Both clusters open the listener on every node with certificates from one CA and the authorizer on; the mirror's
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

LISTENERS = {"sasl_ssl": "SASL_SSL", "mtls": "MTLS"}
USER = "mirror"


class SecuredGround:
    """The CA, the mirror's credentials as a mounted Secret, its cluster entries, and their rotation."""

    def __init__(self, kind: str, workdir: Path) -> None:
        if kind not in LISTENERS:
            raise ValueError(f"--security: {kind!r} is not one of {', '.join(LISTENERS)}")
        self.kind, self.listener = kind, LISTENERS[kind]
        self.ca = CertificateAuthority(workdir / "ca")
        self.generation = 1
        self.secret: MountedSecret | None = None
        self.secret_dir = workdir / "secret"

    @property
    def sasl(self) -> bool:
        return self.kind == "sasl_ssl"

    @property
    def principal(self) -> str:
        """The name the brokers' authorizer knows the mirror by (the certificate's subject under mTLS)."""
        return f"User:{USER}" if self.sasl else f"User:CN={USER}"

    def security(self) -> Security:
        return Security(self.ca, listeners=(self.listener,), authorizer=True,
                        scram_users={USER: self._password()} if self.sasl else {})

    def _password(self) -> str:
        return f"chaos-pw-{self.generation}"

    def _files(self) -> dict[str, bytes]:
        files = {"ca.crt": self.ca.cert.read_bytes()}
        if self.sasl:
            return files | {"password": self._password().encode()}
        issued = self.ca.issue(f"client-gen{self.generation}", USER, client=True)  # same subject, new key
        return files | {"tls.crt": issued.cert.read_bytes(), "tls.key": issued.key.read_bytes()}

    def start(self, clusters: list[ReplicatedKafkaCluster]) -> None:
        """After the clusters started: the mirror's grants on each, and its Secret mounted."""
        for c in clusters:
            c.nodes[0].allow(self.principal)
        self.secret = MountedSecret(self.secret_dir, self._files())

    def entry(self, alias: str, cluster: ReplicatedKafkaCluster) -> dict:
        """The cluster as the mirror's configuration names it: the secured listener, credentials from the Secret."""
        assert self.secret is not None, "start() first"
        auth = ({"type": "scram-sha-512", "username": USER, "password": {"file": self.secret.path("password")}}
                if self.sasl else {"type": "tls", "certificateFile": self.secret.path("tls.crt"),
                                   "keyFile": self.secret.path("tls.key")})
        return {"alias": alias, "bootstrapServers": cluster.bootstrap_of(self.listener),
                "tls": {"caFiles": [self.secret.path("ca.crt")]}, "authentication": auth}

    def rotate(self, clusters: list[ReplicatedKafkaCluster]) -> str:
        """Replace the mirror's credentials while it runs; returns what was replaced."""
        assert self.secret is not None, "start() first"
        self.generation += 1
        if self.sasl:
            info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
            for c in clusters:
                admin = AdminClient({"bootstrap.servers": c.bootstrap})
                upsert = UserScramCredentialUpsertion(USER, info, self._password().encode())
                for fut in admin.alter_user_scram_credentials([upsert]).values():
                    fut.result(60)
        self.secret.update(self._files())
        return f"{'password' if self.sasl else 'certificate'} gen {self.generation}"
