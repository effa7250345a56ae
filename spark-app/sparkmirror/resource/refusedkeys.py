"""The per-client keys refused at `kubectl apply` as well as at reconcile: pure, the CRD's share of clientconf.py.

The plan refuses every key the mirror owns (clientconf.py), but only once the operator reconciles; the API server
refuses the most common of them itself, by CEL rules of the generated CRD (crdgen.py). Which config keys those
are, and why, is computed here from the plan's own tables and prefixes, so a rule never refuses what the plan
would take: a key owned only under exactly-once (`enable.idempotence`) is left to the plan, and so is a cluster's
bare `group.id` (a Connect worker key, not applicable). `tests/unit/test_client_settings.py` plans every key
listed here and checks that the plan refuses it too.
"""
from __future__ import annotations

from .clientconf import CLUSTER_PREFIXES, CONNECTOR_PREFIXES, Client, client_setting, cluster_prefix, connector_prefix
from .mm2keys import (CLUSTER_KEYS_NOT_APPLICABLE_PREFIXES, MIRROR_KEYS, MIRROR_KEYS_FIXED,
                      MIRROR_KEYS_NOT_APPLICABLE_PREFIXES)

REFUSED_AT_APPLY = ("transactional.id", "acks", "isolation.level", "group.id", "enable.auto.commit")
"""Owned keys users set most (MM2 and Strimzi examples, Java habits): each with every prefix that reaches its
client. The rest of clientconf's refusals stay the plan's alone (a rule per key and prefix costs the CRD room)."""


def _refused(client: Client, key: str) -> str | None:
    why = client_setting(client, key, "", exactly_once=False).refused
    return why or None


def cluster_config_refusals() -> dict[str, str]:
    """A cluster's `config` key -> why the plan refuses it (plan.py's order: client prefix, Connect worker keys
    not applicable, the rest for every client)."""
    out: dict[str, str] = {}
    for key in REFUSED_AT_APPLY:
        for config_key in (*(prefix + key for prefix in CLUSTER_PREFIXES), key):
            prefixed = cluster_prefix(config_key)
            if prefixed is None and config_key.startswith(CLUSTER_KEYS_NOT_APPLICABLE_PREFIXES):
                continue
            client, sub = prefixed or ("any", config_key)
            why = _refused(client, sub)
            if why is not None:
                out[config_key] = why
    return dict(sorted(out.items()))


def connector_config_refusals() -> dict[str, str]:
    """A connector's `config` key -> why the plan refuses it (mm2keys.py's order: MM2's own keys first, then
    the client prefixes, longest first)."""
    out: dict[str, str] = {}
    for key in REFUSED_AT_APPLY:
        for prefix in CONNECTOR_PREFIXES:
            config_key = prefix + key
            prefixed = connector_prefix(config_key)
            if prefixed is None or config_key in MIRROR_KEYS or config_key in MIRROR_KEYS_FIXED or \
                    config_key.startswith(MIRROR_KEYS_NOT_APPLICABLE_PREFIXES):
                continue
            _side, client, sub = prefixed
            why = _refused(client, sub)
            if why is not None:
                out[config_key] = why
    return dict(sorted(out.items()))
