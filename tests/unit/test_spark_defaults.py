"""Which malloc-arena settings a driver gives the JVM it starts (sparkdefaults.driver_env_to_set) and its local
workers (local_worker_env)."""
from __future__ import annotations

from sparkmirror.sparkdefaults import driver_env_to_set, glibc_default_arenas, local_worker_env

WORKERS = "spark.executorEnv.MALLOC_ARENA_MAX"


def test_the_jvm_gets_two_arenas_and_local_workers_the_default_back() -> None:
    to_set = driver_env_to_set({})
    assert to_set == {"MALLOC_ARENA_MAX": "2"}
    assert local_worker_env(to_set) == {WORKERS: str(glibc_default_arenas())}


def test_a_later_session_of_the_same_process_keeps_its_workers_on_the_default() -> None:
    environ = {"MALLOC_ARENA_MAX": "2"}  # set by this process for its first session: nothing more to set
    assert driver_env_to_set(environ) == {}
    assert local_worker_env({"MALLOC_ARENA_MAX"}) == {WORKERS: str(glibc_default_arenas())}


def test_the_users_own_value_is_theirs_for_the_jvm_and_the_workers() -> None:
    assert driver_env_to_set({"MALLOC_ARENA_MAX": "4"}) == {}
    assert local_worker_env(set()) == {}  # the driver set nothing: its workers inherit what the user chose
