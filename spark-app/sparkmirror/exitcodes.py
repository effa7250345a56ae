"""The driver's exit code for a mirror's failure: a refusal the operator's status names (names.EXIT_*) or a plain
failure. Pure: the operator reads the code on the application's status to tell them apart."""
from __future__ import annotations

from .faultkind import Kind, refusal_in
from .replicas import refusal_in as too_few_brokers
from .resource.names import EXIT_FAILED, EXIT_TOO_FEW_BROKERS, EXIT_UNAUTHORIZED


NAMED_EXIT_CODES = frozenset({EXIT_UNAUTHORIZED, EXIT_TOO_FEW_BROKERS})  # the status gives each its own reason


def exit_code_of(error: str) -> int:
    """The exit code of a mirror's failure (names.EXIT_*): a cluster's ACLs refusing it and a target with too few
    brokers have their own, so the operator's status names the refusal rather than a failed application."""
    if refusal_in(error) == Kind.AUTHORIZATION:
        return EXIT_UNAUTHORIZED
    return EXIT_TOO_FEW_BROKERS if too_few_brokers(error) else EXIT_FAILED
