"""KRaft Kafka clusters run from the cached Maven jars: a single combined broker + controller (`KafkaCluster`), or
three combined nodes with replication factor 3 and min.insync.replicas 2 (`ReplicatedKafkaCluster`).

A `KafkaCluster` runs the ground's Kafka release (paths.KAFKA_VERSION) unless given another `version` (the broker
matrix); a 3.x one can run in ZooKeeper mode instead of KRaft (`zookeeper=True`: a ZooKeeper server of its own).

By default a node has one PLAINTEXT listener. With `security` it also opens secured listeners, each on its own
loopback port (TLS, mTLS, SASL/SCRAM-SHA-512 over TLS or plaintext), with certificates the ground makes itself
and optionally KRaft's StandardAuthorizer; the PLAINTEXT listener stays the tests' own admin door (a super user).
"""
from __future__ import annotations

import os
import signal
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import install, paths
from .certs import CertificateAuthority
from .procs import DevEnvError, free_port, java_cmd, pick_ports, spawn, stop_pid, wait_until
from .zookeeper import ZooKeeper

__all__ = ["KafkaCluster", "ReplicatedKafkaCluster", "Security", "java_cmd"]  # java_cmd: bench's import


SCRAM_MECHANISM = "SCRAM-SHA-512"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SECURED_PROTOCOLS = {"SSL": "SSL", "MTLS": "SSL", "SASL_SSL": "SASL_SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"}
"""Secured listener name -> security protocol; MTLS is SSL with `ssl.client.auth=required`."""


@dataclass
class Security:
    """What a secured cluster adds: listeners (names of SECURED_PROTOCOLS), SCRAM users created when the
    storage is formatted (KRaft's way to get first credentials), and the authorizer. With the authorizer on,
    `User:ANONYMOUS` (the PLAINTEXT, SSL-without-client-certificate and controller listeners) is a super user;
    every other principal needs ACLs (`KafkaCluster.allow`)."""

    ca: CertificateAuthority
    listeners: tuple[str, ...] = tuple(SECURED_PROTOCOLS)
    scram_users: dict[str, str] = field(default_factory=dict)
    authorizer: bool = False

    def properties(self, broker: "KafkaCluster") -> dict[str, str]:
        keystore = self.ca.issue(f"broker-{broker.name}", "localhost", ["DNS:localhost", "IP:127.0.0.1"]).keystore
        props = {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore),
                 "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca.cert),
                 "listener.name.mtls.ssl.client.auth": "required"}
        for name in self.listeners:
            if SECURED_PROTOCOLS[name].startswith("SASL"):
                props[f"listener.name.{name.lower()}.sasl.enabled.mechanisms"] = SCRAM_MECHANISM
                props[f"listener.name.{name.lower()}.{SCRAM_MECHANISM.lower()}.sasl.jaas.config"] = \
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        if self.authorizer:
            props |= {"authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS"}
        return props

    def format_args(self) -> list[str]:
        return [a for user, password in self.scram_users.items()
                for a in ("--add-scram", f"{SCRAM_MECHANISM}=[name={user},password={password}]")]


@dataclass
class KafkaCluster:
    """One named cluster on its own loopback ports, with its data and log under `home`: Kafka `version` (the
    ground's by default) in KRaft mode, or in ZooKeeper mode (`zookeeper`, 3.x only; no `security` then)."""

    name: str
    home: Path
    port: int = 0
    controller_port: int = 0
    heap: str = "512m"
    extra: dict[str, str] = field(default_factory=dict)
    security: Security | None = None
    listener_ports: dict[str, int] = field(default_factory=dict)  # secured listener name -> port
    cluster_id: str = ""            # shared by the nodes of one multi-node cluster; random when empty
    brokers: int = 1                # brokers the metadata must list before this node counts as ready
    version: str = paths.KAFKA_VERSION
    zookeeper: bool = False
    zk: ZooKeeper | None = field(default=None, repr=False)
    pid: int | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bootstrap_of(self, listener: str) -> str:
        """The bootstrap address of a secured listener (`SSL`, `MTLS`, `SASL_SSL`, `SASL_PLAINTEXT`)."""
        return f"127.0.0.1:{self.listener_ports[listener]}"

    def allow(self, principal: str, *, deny: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        """ACLs (authorizer on): `principal` may do everything on every topic, group, transactional id and the
        cluster, except the operations `deny` maps to a topic name prefix (e.g. {"WRITE": "a.denied-"})."""
        from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                           ResourcePatternType, ResourceType)

        def binding(rtype, name, pattern, op, perm) -> AclBinding:
            return AclBinding(rtype, name, pattern, principal, "*", op, perm)

        acls = [binding(t, "kafka-cluster" if t == ResourceType.BROKER else "*", ResourcePatternType.LITERAL,
                        AclOperation.ALL, AclPermissionType.ALLOW)
                for t in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID, ResourceType.BROKER)]
        acls += [binding(ResourceType.TOPIC, prefix, ResourcePatternType.PREFIXED, AclOperation[op],
                         AclPermissionType.DENY) for op, prefix in (deny or {}).items()]
        admin = AdminClient({"bootstrap.servers": self.bootstrap})  # alive until the answers come
        for fut in admin.create_acls(acls).values():
            fut.result(timeout)

    def disallow(self, principal: str, timeout: float = 30.0) -> None:
        """Delete every ACL of `principal` (authorizer on): its sessions are refused from their next request."""
        from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                           ResourcePatternType, ResourceType)

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                               AclPermissionType.ANY)
        for fut in admin.delete_acls([flt]).values():
            fut.result(timeout)

    def alter_broker_config(self, props: dict[str, str], timeout: float = 120.0) -> str:
        """Set dynamic broker configs with Kafka's own `kafka-configs` (its main class from this release's jars) through the PLAINTEXT admin door, as an operator of the cluster would: e.g. a
        listener's new keystore (`listener.name.mtls.ssl.keystore.location`), which the broker loads in place."""
        node = "1"  # KafkaCluster's node.id / broker.id
        args = ["--bootstrap-server", self.bootstrap, "--alter", "--entity-type", "brokers", "--entity-name", node,
                "--add-config", ",".join(f"{k}={v}" for k, v in props.items())]
        res = subprocess.run(java_cmd(install.kafka(self.version), install.tool_class(self.version, "ConfigCommand"), *args,
                                      heap="256m"),
                             capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise DevEnvError(f"Kafka cluster {self.name!r}: kafka-configs {' '.join(args)} failed:\n"
                              + (res.stdout + res.stderr)[-2000:])
        return res.stdout

    @property
    def log(self) -> Path:
        return self.home / "kafka.log"

    @property
    def mode(self) -> str:
        return "zookeeper" if self.zookeeper else "kraft"

    def _roles(self, advertised: str) -> dict[str, str]:
        """What makes this node a combined KRaft broker + controller, or a broker of its ZooKeeper."""
        if self.zookeeper:
            assert self.zk is not None
            return {"broker.id": "1", "zookeeper.connect": self.zk.connect, "listeners": advertised}
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"{advertised},CONTROLLER://127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
        }

    def properties(self) -> dict[str, str]:
        served = {"PLAINTEXT": self.port, **self.listener_ports}
        advertised = ",".join(f"{n}://127.0.0.1:{p}" for n, p in served.items())
        protocols = {"PLAINTEXT": "PLAINTEXT", **{n: SECURED_PROTOCOLS[n] for n in self.listener_ports},
                     **({} if self.zookeeper else {"CONTROLLER": "PLAINTEXT"})}
        return {
            **self._roles(advertised),
            "advertised.listeners": advertised,
            "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in protocols.items()),
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.home / "data"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "5",
            "group.initial.rebalance.delay.ms": "0",
            "log.segment.bytes": str(64 * 1024 * 1024),
            "log.cleaner.backoff.ms": "1000",  # a topic made to compact soon (tests) does within seconds
            **(self.security.properties(self) if self.security else {}),
            **self.extra,
        }

    def start(self, timeout: float = 90.0) -> "KafkaCluster":
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Format the storage (first time only; in ZooKeeper mode start the ZooKeeper server instead) and spawn
        the JVM, without waiting for it."""
        libs = install.kafka(self.version)
        if self.zookeeper and self.security is not None:
            raise DevEnvError(f"Kafka cluster {self.name!r}: secured listeners are for KRaft clusters only")
        listeners = list(self.security.listeners) if self.security is not None else []
        ports = pick_ports({"broker": self.port, **({} if self.zookeeper else {"controller": self.controller_port}),
                            **{f"{n} listener": self.listener_ports.get(n) for n in listeners}},
                           f"Kafka cluster {self.name!r}")
        self.port, self.controller_port = ports["broker"], ports.get("controller", 0)
        if self.security is not None:
            self.listener_ports = {n: ports[f"{n} listener"] for n in listeners}
        self.home.mkdir(parents=True, exist_ok=True)
        props = self.home / "server.properties"
        if self.zookeeper and (self.zk is None or self.zk.pid is None):
            self.zk = (self.zk or ZooKeeper(self.home / "zookeeper", libs)).start()
        props.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        if not self.zookeeper and not (self.home / "data" / "meta.properties").exists():
            fmt_log = self.home / "format.log"
            with open(fmt_log, "wb") as out:
                rc = subprocess.call(java_cmd(libs, "kafka.tools.StorageTool", "format", "-t",
                                              self.cluster_id or uuid.uuid4().hex[:22], "-c", str(props),
                                              *(self.security.format_args() if self.security else []), heap="256m"),
                                     stdout=out, stderr=subprocess.STDOUT)
            if rc != 0:
                raise DevEnvError(f"Kafka cluster {self.name!r}: formatting storage failed; see {fmt_log}:\n"
                                  + fmt_log.read_text(errors="replace")[-2000:])
        self.proc = spawn(java_cmd(libs, "kafka.Kafka", str(props), heap=self.heap), self.log)
        self.pid = self.proc.pid

    def wait_ready(self, timeout: float = 90.0) -> None:
        try:
            wait_until(self._ready, self.proc, f"Kafka cluster {self.name!r} ({self.bootstrap})", self.log, timeout)
        except DevEnvError:
            self.stop()
            raise

    def _ready(self) -> bool:
        import socket

        from confluent_kafka.admin import AdminClient

        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()  # quiet probe before librdkafka

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 1000})
        md = admin.list_topics(timeout=1)
        return len(md.brokers) == self.brokers and md.controller_id >= 0

    def stop(self) -> None:
        if self.pid is not None:
            stop_pid(self.pid)
            if self.proc is not None:
                self.proc.wait(timeout=5)
            self.pid = None
        if self.zk is not None:  # after the broker: a broker losing its ZooKeeper waits for it to come back
            self.zk.stop()

    def kill(self) -> None:
        """SIGKILL the broker's JVM (no clean shutdown; its ZooKeeper keeps running); its data stays for the next
        start."""
        if self.pid is not None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if self.proc is not None:
                self.proc.wait(30)
            self.pid = None


_REPLICATED = {
    "num.partitions": "1", "default.replication.factor": "3", "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2", "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}


@dataclass
class ReplicatedKafkaCluster:
    """Three combined broker + controller nodes on loopback (a quorum of 3 controllers survives one loss);
    topics default to replication factor 3 and min.insync.replicas 2. Nodes can be SIGKILLed and started one
    by one, or the whole cluster at once, their data kept."""

    name: str
    home: Path
    size: int = 3
    heap: str = "384m"
    extra: dict[str, str] = field(default_factory=dict)
    security: Security | None = None
    """Secured listeners on every node (their certificates from one CA, the same SCRAM users and authorizer);
    PLAINTEXT stays the nodes' admin door and the inter-broker listener."""
    nodes: list[KafkaCluster] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.nodes:
            ports = [(free_port(), free_port()) for _ in range(self.size)]
            voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
            cid = uuid.uuid4().hex[:22]
            self.nodes = [KafkaCluster(f"{self.name}-{i}", self.home / f"node{i}", port=p, controller_port=c,
                                       heap=self.heap, cluster_id=cid, brokers=self.size, security=self.security,
                                       extra={"node.id": str(i + 1), "controller.quorum.voters": voters,
                                              **_REPLICATED, **self.extra})
                          for i, (p, c) in enumerate(ports)]

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def bootstrap_of(self, listener: str) -> str:
        """Every node's address on a secured listener (after `start`)."""
        return ",".join(n.bootstrap_of(listener) for n in self.nodes)

    @property
    def pids(self) -> list[int]:
        return [n.pid for n in self.nodes if n.pid is not None]

    def start(self, timeout: float = 120.0) -> "ReplicatedKafkaCluster":
        """Start every node that is not running (together: a controller quorum needs a majority up)."""
        down = [n for n in self.nodes if n.pid is None]
        for n in down:
            n.launch()
        for n in down:
            n.wait_ready(timeout)
        return self

    def kill(self, index: int) -> None:
        self.nodes[index].kill()

    def start_node(self, index: int, timeout: float = 120.0) -> None:
        node = self.nodes[index]
        if node.pid is None:
            node.launch()
            node.wait_ready(timeout)

    def kill_all(self) -> None:
        for n in self.nodes:
            n.kill()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()
