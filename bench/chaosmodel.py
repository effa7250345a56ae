"""The fault campaign's record (`python -m bench.chaos`): the kinds of fault, one fault as it happened, the
campaign's settings and what it counted. Shared by the campaign, its ground and its report."""
from __future__ import annotations

from dataclasses import dataclass, field

PARTS = 3
KINDS = ("driver", "python-worker", "executor", "source-broker", "target-broker")
OUTAGES = ("source-outage", "target-outage")
ROTATION = "rotation"  # the mirror's credentials replaced while it runs (secured campaigns only)
TX_TIMEOUT_MS = 15000  # lanes' transaction.timeout.ms; message.timeout.ms follows it (copying/start.py)
# every client timeout of the mirror an outage must outlast: lanes' transaction and message timeouts, the 30 s
# offset reads, the 60 s init_transactions and librdkafka's 60 s socket.timeout.ms, 45 s session.timeout.ms
LISTENERS = {"sasl_ssl": "SASL_SSL", "mtls": "MTLS"}  # `--security` kind -> the clusters' listener name
CLIENT_TIMEOUTS_S = {"transaction.timeout.ms": TX_TIMEOUT_MS / 1000, "message.timeout.ms": TX_TIMEOUT_MS / 1000,
                     "offset reads": 30, "init_transactions": 60, "socket.timeout.ms": 60, "session.timeout.ms": 45}



def listener_kinds(security: str) -> dict[str, str]:
    """role -> listener kind of `--security` ("mtls": both; "sasl_ssl:mtls": source, target); "none" for plaintext.
    Raises ValueError naming the option."""
    parts = security.split(":")
    if len(parts) > 2 or any(p not in ("none", *LISTENERS) for p in parts) or (len(parts) == 2 and "none" in parts):
        raise ValueError(f"--security: {security!r} is none, one of {', '.join(LISTENERS)}, or SOURCE:TARGET of them")
    source, target = parts if len(parts) == 2 else parts * 2
    return {"source": source, "target": target}


@dataclass
class Fault:
    kind: str
    at: float                # monotonic time of the kill
    repaired: float = 0.0    # when the killed part was back (restarted broker/cluster/driver; = at otherwise)
    resumed: float = 0.0     # first target growth after `repaired`; 0 = never within the wait
    stall_s: float = 0.0
    detail: str = ""

    @property
    def recovery_s(self) -> float:
        return self.resumed - self.at if self.resumed else float("nan")


@dataclass
class Campaign:
    kills: int
    outages: int
    outage_s: float
    pause_s: float
    rate: float
    kinds: tuple[str, ...] = KINDS  # which kills each round makes
    copy: str = "records"    # the lanes' copy path (records | batches)
    security: str = "none"   # the mirror's listener on both clusters (none = PLAINTEXT, sasl_ssl, mtls) or SOURCE:TARGET
    rotations: int = 0       # credential rotations (secured campaigns)
    recount_after_s: float = 60.0  # the count again this long after catch-up: a late duplicate shows there
    faults: list[Fault] = field(default_factory=list)
    sent: int = 0
    records: int = 0
    missing: int = -1
    duplicated: int = -1
    reordered: int = -1      # a sequence number first seen after a higher one in its partition
    recount: dict[str, int] = field(default_factory=dict)  # missing, duplicated, reordered after recount_after_s
    mirror_ended: list[str] = field(default_factory=list)   # unexpected ends of the job (restarted)
    catch_up_s: float = 0.0
    wall_s: float = 0.0
