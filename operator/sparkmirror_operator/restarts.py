"""Restarts: which flow groups `sparkmirror.io/restart` rolls, and the job's exit contract (resource/names.py
EXIT_*) as the Lease records it and the Spark operator's state carries it (`exit_code`). Pure, used by rollout.py
and exitcontract.py (which applies the contract)."""
from __future__ import annotations

import re

from sparkmirror.resource.flowgroup import FlowGroupConfig

ANNOTATION_RESTART = "sparkmirror.io/restart"
ANNOTATION_REFUSED = "sparkmirror.io/refused"
"""On a flow group's Lease: the generation whose job refused to run (JSON: generation, exitCode, reason); its
application is removed and not started again until a restart or a change makes a new generation."""
RESUBMIT_AFTER_SECONDS = 60
"""A generation that exited 0 while its Lease still names it (nothing took it over: a deleted or evicted driver
pod that drained) is submitted again, at most once per this many seconds (its application's age)."""
RESTART_SUFFIX = "+restart."


def restart_request(value: str, groups: list[str]) -> tuple[frozenset[str], str]:
    """The flow groups `sparkmirror.io/restart` names and its token (what must change for a restart):

    - `<groups>@<token>`: the comma-separated flow groups (`all` or none: every one), restarted whenever the
      token changes (e.g. `east@3`, `east,west@2024-06-01T10:00`, `all@7`);
    - a comma-separated list of flow-group names: those groups, the value being the token;
    - any other value (the meaning before flow groups could be named): every flow group, the value the token.
    An absent or empty annotation restarts nothing. Names of no flow group are ignored."""
    value = value.strip()
    if not value:
        return frozenset(), ""
    if "@" in value:
        names, token = value.split("@", 1)
        wanted = {n.strip() for n in names.split(",") if n.strip()}
        if not wanted or wanted == {"all"}:
            return frozenset(groups), token
        return frozenset(wanted & set(groups)), token
    items = {n.strip() for n in value.split(",")}
    if items <= set(groups):
        return frozenset(items), value
    return frozenset(groups), value


def restart_of(cfg: FlowGroupConfig, token: str) -> FlowGroupConfig:
    """The restart token rides in the worker's version label, so a changed token changes what runs."""
    base = cfg.worker.version.split(RESTART_SUFFIX, 1)[0]
    version = f"{base}{RESTART_SUFFIX}{token}" if token else base
    return cfg.model_copy(update={"worker": cfg.worker.model_copy(update={"version": version})})


def restart_token(cfg: FlowGroupConfig | None) -> str:
    return cfg.worker.version.split(RESTART_SUFFIX, 1)[1] if cfg and RESTART_SUFFIX in cfg.worker.version else ""


_EXIT_CODE = re.compile(r"ExitCode: (\d+)")  # the Kubeflow Spark operator's errorMessage of a failed driver


def exit_code(error_message: str | None) -> int | None:
    """The driver's exit code in the Kubeflow Spark operator's errorMessage of a failed driver, if it says one."""
    match = _EXIT_CODE.search(error_message or "")
    return int(match.group(1)) if match else None
