"""The batch path's talk with one cluster over the wire (`sparkmirror.wire`), in the lane's terms: what it waits
out, what refuses the mirror, what stops it (`errors`)."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import kafka.errors as kerrors

from ..faultkind import of_broker_code
from ..wire.connection import WireError, tls_kind
from ..wire.settings import WireSettingError
from .errors import CopyError, Unreachable, accepted, refused

__all__ = ["wire_talk"]


@contextmanager
def wire_talk(side: str, cluster: str, what: str) -> Iterator[None]:
    """Run the batch path's I/O against one cluster, as `errors.talking_to` does for librdkafka's: a retriable
    error or a broken connection is `Unreachable` (waited out), a refusal (`WireError.kind`) `errors.refused`'s
    (waited on for the credentials' grace, then `Refused` naming the cluster and the kind), another answer a
    `CopyError` naming the cluster and what was done (or the client setting the wire cannot take); fencing
    (`LaneFenced`) passes through."""
    try:
        yield
    except WireError as e:
        if e.kind.refused:  # waited on for the credentials' grace when new ones could cure it
            raise refused(side, cluster, e.kind, f"{what}: {e}") from e
        if e.retriable or issubclass(e.error, kerrors.KafkaConnectionError):
            raise Unreachable(side, cluster, f"{what}: {e}") from e
        raise CopyError(f"{side} cluster {cluster!r}: {what} failed: {e}") from e
    except kerrors.KafkaError as e:  # kafka-python's own client (bootstrap, metadata)
        kind = of_broker_code(getattr(e, "errno", None) or 0)
        if kind.refused:
            raise refused(side, cluster, kind, f"{what}: {type(e).__name__}: {e}") from e
        if getattr(e, "retriable", False) or isinstance(e, kerrors.KafkaConnectionError):
            raise Unreachable(side, cluster, f"{what}: {type(e).__name__}: {e}") from e
        raise CopyError(f"{side} cluster {cluster!r}: {what} failed: {type(e).__name__}: {e}") from e
    except WireSettingError as e:  # a client setting the wire cannot take: the message names it
        raise CopyError(str(e)) from e
    except OSError as e:  # a socket refused or reset outside a request
        kind = tls_kind(e)
        if kind.refused:
            raise refused(side, cluster, kind, f"{what}: {e!r}") from e
        raise Unreachable(side, cluster, f"{what}: {e}") from e
    accepted(cluster)
