"""Who a lane is: its flow group, mirror, number, transactional id, route and both clusters' client settings.
Every part of a lane (reader, writer, committer, growth) reads it; only growth adds to the route. The client
settings hold secrets read at a moment (`credentials`: their fingerprint then); a fresh start reads them again
(`reload`), so a Secret replaced meanwhile reaches the lane's new clients."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..credentials import fingerprints
from ..lanes import LanePartition
from ..resource.flowgroup import FlowGroupConfig, Mirror
from ..resource.names import transactional_id
from .shares import PartitionKey


@dataclass
class LaneContext:
    config: FlowGroupConfig
    mirror: Mirror
    lane: int
    partitions: list[LanePartition]
    tid: str = ""
    route: dict[PartitionKey, str] = field(default_factory=dict)  # source partition -> remote topic
    source_conf: dict[str, str] = field(default_factory=dict)
    target_conf: dict[str, str] = field(default_factory=dict)
    consumer_conf: dict[str, str] = field(default_factory=dict)  # source_conf and the user's consumer settings
    producer_conf: dict[str, str] = field(default_factory=dict)  # target_conf and the user's producer settings
    credentials: str = ""  # fingerprint of both clusters' secrets, read before the settings were

    def __post_init__(self) -> None:
        self.tid = transactional_id(self.config.resource, self.config.name, self.mirror.name, self.lane)
        self.route = {(p.source_topic, p.partition): p.target_topic for p in self.partitions}
        self.reload()

    def reload(self) -> None:
        """Both clusters' client settings read now (the fingerprint first: a secret replaced in between makes
        the fingerprint older than the settings, which costs one more fresh start, never a stale client)."""
        self.credentials = current_credentials(self.config, self.mirror)
        self.source_conf = self.config.cluster(self.mirror.source).client_config()
        self.target_conf = self.config.cluster(self.mirror.target).client_config()
        self.consumer_conf = self.config.consumer_config(self.mirror)
        self.producer_conf = self.config.producer_config(self.mirror)

    @property
    def name(self) -> str:
        return self.mirror.name


def current_credentials(config: FlowGroupConfig, mirror: Mirror) -> str:
    """The fingerprint of a mirror's clusters' secrets now (what a lane's kept clients are compared with)."""
    return fingerprints([config.cluster(mirror.source), config.cluster(mirror.target)])
