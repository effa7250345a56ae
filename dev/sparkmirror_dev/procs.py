"""Starting and stopping the local environment's processes, with failures that name what failed."""
from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from . import paths


def java_cmd(libs: Path, main: str, *args: str, heap: str = "512m", log4j: bool = True) -> list[str]:
    """`main` of the jars in `libs` (one Kafka release's), logging through the ground's log4j2 configuration."""
    java = shutil.which("java") or "java"
    cmd = [java, f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true"]
    if log4j:
        cmd.append(f"-Dlog4j2.configurationFile={paths.HERE / 'log4j2.properties'}")
    return [*cmd, "-cp", f"{libs}/*", main, *args]


class DevEnvError(RuntimeError):
    """Something of the local environment could not start; the message names it and shows its log tail."""


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text[-lines:])


_handed_out: set[int] = set()
_port_lock = threading.Lock()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A listenable port below the kernel's ephemeral range, never the same one twice in this process.

    Ports from bind(0) come from the ephemeral range, where the kernel also picks the source port of every
    outgoing connection (Kafka clients open many) and may hand the same port to two threads in a row; either
    can take the port between choosing it and the server binding it.
    """
    high = _ephemeral_low()
    low = max(1024, min(20000, high - 5000))
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    with _port_lock:
        for _ in range(500):
            port = rng.randrange(low, high)
            if port in _handed_out:
                continue
            with socket.socket() as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    raise DevEnvError(f"no free port on {host} in {low}-{high - 1}")


def check_port_free(port: int, what: str, host: str = "127.0.0.1") -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise DevEnvError(f"{what}: port {host}:{port} is already in use ({e.strerror})") from e


def pick_ports(given: dict[str, int | None], what: str = "") -> dict[str, int]:
    """role -> a bindable port: the caller's where given (checked, reported when taken, never swapped), a free
    one otherwise, chosen again (up to 10 times) when another process (a client's source port, a broker) took
    it between choosing and checking."""
    for attempt in range(10):
        ports = {role: p or free_port() for role, p in given.items()}
        try:
            for role, p in ports.items():
                check_port_free(p, f"{what} {role}".strip())
            return ports
        except DevEnvError:
            if all(given.values()) or attempt == 9:
                raise
    raise AssertionError("unreachable")


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.Popen:
    """Start a process in its own session (so a stop reaches its children), output to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)


def wait_until(ready: Callable[[], bool], proc: subprocess.Popen | None, what: str, log: Path,
               timeout: float = 90.0, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise DevEnvError(f"{what} exited with code {proc.returncode} while starting; "
                              f"last lines of {log}:\n{log_tail(log)}")
        try:
            if ready():
                return
        except Exception:  # noqa: BLE001 - not ready yet, whatever the reason
            pass
        time.sleep(interval)
    raise DevEnvError(f"{what} was not ready after {timeout:.0f}s; last lines of {log}:\n{log_tail(log)}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def stop_pid(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM the process group, then SIGKILL what is left after `timeout`."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            if not pid_alive(pid):
                return
            time.sleep(0.1)
