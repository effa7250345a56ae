"""Which malloc-arena settings a driver gives the JVM it starts and its local workers (sparkdefaults.jvm_launch_env)."""
from __future__ import annotations

from sparkmirror.sparkdefaults import glibc_default_arenas, jvm_launch_env

WORKERS = "spark.executorEnv.MALLOC_ARENA_MAX"


def test_the_jvm_gets_two_arenas_and_local_workers_the_default_back() -> None:
    assert jvm_launch_env({}, set(), local=True) == ({"MALLOC_ARENA_MAX": "2"}, {WORKERS: str(glibc_default_arenas())})
    assert jvm_launch_env({}, set(), local=False) == ({"MALLOC_ARENA_MAX": "2"}, {})  # executors are not given it


def test_a_later_session_of_the_same_process_keeps_its_workers_on_the_default() -> None:
    environ = {"MALLOC_ARENA_MAX": "2"}  # set by this process for its first session
    assert jvm_launch_env(environ, {"MALLOC_ARENA_MAX"}, local=True) == ({}, {WORKERS: str(glibc_default_arenas())})


def test_the_users_own_value_is_theirs_for_the_jvm_and_the_workers() -> None:
    assert jvm_launch_env({"MALLOC_ARENA_MAX": "4"}, set(), local=True) == ({}, {})
