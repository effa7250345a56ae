"""Who holds a lane's transactional id now: whether another copy of the lane took it since this one held it.

A lane whose commit is answered with an error that neither fences it nor is retriable (a broker answered an
EndTxn that raced a newer copy's InitProducerId with UNKNOWN_SERVER_ERROR; KAFKA-20785's INVALID_TXN_STATE after
the coordinator aborted on its own) does not know its transaction's outcome, nor whether it was fenced. It starts
again from its committed progress, and a fresh start's InitProducerId would fence whichever copy holds the id:
the newer one, if it took over meanwhile. So it asks the coordinator first (DescribeTransactions, Kafka 3.0+),
and stops instead when the id moved on. The epochs tell (EndTxn v0-v3, as the batch writer speaks it, never
bumps them): a newer copy's InitProducerId bumps the epoch once (twice when it fenced an open transaction);
the coordinator's own abort of a timed-out transaction bumps it once and leaves that transaction aborted.
"""
from __future__ import annotations

import logging

import kafka.errors as kerrors
from kafka.protocol.admin.transactions import DescribeTransactionsRequest

from ..wire.cluster import Wire
from ..wire.connection import WireError, check

log = logging.getLogger(__name__)

_OWN_ABORT = {"PrepareAbort", "CompleteAbort"}
"""The states the coordinator leaves after aborting a timed-out transaction of the producer it fenced."""


def moved_on(state: str, producer_id: int, epoch: int, held_id: int, held_epoch: int) -> bool:
    """Whether the coordinator's holding of an id (its transaction `state`, producer id and epoch) says another
    producer took it since one held (`held_id`, `held_epoch`). Another producer id counts as moved on (an epoch
    exhausted and rotated too: stopping for an epoch is the safe side); the one bump of the coordinator's own
    abort does not."""
    if producer_id != held_id:
        return True
    if epoch <= held_epoch:
        return False
    return epoch > held_epoch + 1 or state not in _OWN_ABORT


def taken_over(wire: Wire, transactional_id: str, held_id: int, held_epoch: int) -> bool:
    """Ask `transactional_id`'s coordinator whether another producer took the id since (held_id, held_epoch).
    False when the broker cannot say (before Kafka 3.0, or the id expired): the progress check stays the
    backstop (lane.py, `check_not_taken_over`). A broker away raises `WireError` (the caller waits it out)."""
    if held_id < 0:
        return False
    coordinator = wire.transaction_coordinator(transactional_id)
    try:
        resp = wire.call(DescribeTransactionsRequest(transactional_ids=[transactional_id]), coordinator)
    except WireError as e:
        if e.error in (kerrors.UnsupportedVersionError, kerrors.IncompatibleBrokerVersion):
            return False
        raise
    s = resp.transaction_states[0]
    if s.error_code == kerrors.TransactionalIdNotFoundError.errno:
        return False
    check(s.error_code, f"DescribeTransactions for {transactional_id}")
    moved = moved_on(s.transaction_state, s.producer_id, s.producer_epoch, held_id, held_epoch)
    log.info("transactional id %s: held as %d/%d, the coordinator has %d/%d (%s): %s", transactional_id,
             held_id, held_epoch, s.producer_id, s.producer_epoch, s.transaction_state,
             "taken over" if moved else "still this copy's")
    return moved
