#!/usr/bin/python3
"""runc for the test ground's dockerd on machines whose capability bounding set lacks some capabilities.

Docker 20.10 gives a `--privileged` container every capability the kernel knows, and runc fails with "unable
to apply caps: operation not permitted" when this machine's own bounding set lacks one (here CAP_SYS_RESOURCE).
kind's node containers are privileged. This shim removes from the container's (or exec'd process's) spec the
capabilities this machine cannot grant, then runs the real runc; nothing else changes. Newer Docker engines do
the same filtering themselves.
"""
import json
import os
import sys

RUNC = os.environ.get("SPARKMIRROR_REAL_RUNC", "/usr/sbin/runc")
CAP_NAMES = ["CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
             "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
             "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
             "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL",
             "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ",
             "PERFMON", "BPF", "CHECKPOINT_RESTORE"]


def unavailable() -> set[str]:
    with open("/proc/self/status") as f:
        bnd = int(next(line.split()[1] for line in f if line.startswith("CapBnd:")), 16)
    return {f"CAP_{n}" for i, n in enumerate(CAP_NAMES) if not bnd >> i & 1}


def filter_caps(process: dict, drop: set[str]) -> bool:
    caps = process.get("capabilities") or {}
    changed = False
    for kind, names in caps.items():
        if isinstance(names, list) and drop.intersection(names):
            caps[kind] = [n for n in names if n not in drop]
            changed = True
    return changed


def rewrite(path: str, key: str | None, drop: set[str]) -> None:
    with open(path) as f:
        doc = json.load(f)
    if filter_caps(doc[key] if key else doc, drop):
        with open(path, "w") as f:
            json.dump(doc, f)


def main(argv: list[str]) -> None:
    drop = unavailable()
    if drop:
        for flag, key, name in (("--bundle", "process", "config.json"), ("-b", "process", "config.json"),
                                ("--process", None, None), ("-p", None, None)):
            if flag in argv[:-1]:
                value = argv[argv.index(flag) + 1]
                rewrite(os.path.join(value, name) if name else value, key, drop)
    os.execv(RUNC, [RUNC, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
