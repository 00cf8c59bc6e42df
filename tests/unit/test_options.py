"""Bad configuration fails when the guard, middleware or callback handler is created."""

from __future__ import annotations

import re
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import (
    GuardConfig,
    ReplayGuard,
    ReplayGuardCallbackHandler,
    ReplayGuardMiddleware,
)

# Every constructor that takes the guard's options, as a user would call it.
GUARDS = {
    "ReplayGuard": lambda **kw: ReplayGuard(**kw),
    "ReplayGuardMiddleware": lambda **kw: ReplayGuardMiddleware(**kw),
    "ReplayGuardCallbackHandler": lambda **kw: ReplayGuardCallbackHandler(**kw),
    "guard.callback_handler": lambda **kw: ReplayGuard().callback_handler(**kw),
}
WITH_STORE_AND_NAMESPACE = ["ReplayGuard", "ReplayGuardMiddleware", "ReplayGuardCallbackHandler"]
WITH_RECORD = ["ReplayGuard", "ReplayGuardMiddleware"]
WITH_MAX_THREADS = ["ReplayGuardCallbackHandler", "guard.callback_handler"]


def fails(kind: str, error: type[Exception], pattern: str, **options: Any) -> str:
    with pytest.raises(error) as caught:
        GUARDS[kind](**options)
    text = str(caught.value)
    assert re.search(pattern, text), text
    return text


@pytest.mark.parametrize("kind", WITH_STORE_AND_NAMESPACE)
def test_a_path_as_store_is_refused_with_how_to_open_it(kind: str) -> None:
    text = fails(kind, TypeError, r"^store must be a LangGraph BaseStore", store="sqlite.db")
    assert "got str 'sqlite.db'" in text
    assert "SqliteStore(sqlite3.connect('sqlite.db'" in text


@pytest.mark.parametrize("kind", WITH_STORE_AND_NAMESPACE)
def test_a_checkpointer_as_store_is_refused(kind: str) -> None:
    text = fails(kind, TypeError, r"^store must be", store=InMemorySaver())
    assert "got InMemorySaver" in text
    assert "checkpointer" in text


def test_an_unentered_store_context_manager_is_refused(tmp_path: Any) -> None:
    manager = SqliteStore.from_conn_string(str(tmp_path / "guard.db"))
    text = fails("ReplayGuard", TypeError, r"^store must be", store=manager)
    assert "with SqliteStore.from_conn_string(path) as store" in text


@pytest.mark.parametrize("kind", WITH_STORE_AND_NAMESPACE)
@pytest.mark.parametrize(
    ("namespace", "error", "detail"),
    [
        ((1, 2), TypeError, r"got \(1, 2\) \(part 0 is int 1\)"),
        (("replay_guard", None), TypeError, r"part 1 is NoneType None"),
        ("tenantA", TypeError, r"got str 'tenantA'"),
        (42, TypeError, r"got int 42"),
        ((), ValueError, r"at least one part"),
    ],
)
def test_a_bad_namespace_is_refused(
    kind: str, namespace: Any, error: type[Exception], detail: str
) -> None:
    text = fails(kind, error, r"^namespace must", namespace=namespace)
    assert re.search(detail, text), text
    assert "('replay_guard', 'tenant-42')" in text  # what to write instead


@pytest.mark.parametrize("kind", WITH_RECORD)
@pytest.mark.parametrize("record", ["yes", 1, None, "records.db"])
def test_a_bad_record_option_is_refused(kind: str, record: Any) -> None:
    text = fails(kind, TypeError, r"^record must be True", record=record, store=InMemoryStore())
    assert f"got {type(record).__name__} {record!r}" in text


@pytest.mark.parametrize("kind", WITH_MAX_THREADS)
@pytest.mark.parametrize(
    ("max_threads", "error", "pattern"),
    [
        ("10", TypeError, r"^max_threads must be an int .*got str '10'"),
        (10.0, TypeError, r"^max_threads must be an int .*got float 10.0"),
        (True, TypeError, r"^max_threads must be an int .*got bool True"),
        (0, ValueError, r"^max_threads=0 must be at least 1"),
    ],
)
def test_a_bad_max_threads_is_refused(
    kind: str, max_threads: Any, error: type[Exception], pattern: str
) -> None:
    fails(kind, error, pattern, max_threads=max_threads)


@pytest.mark.parametrize("kind", ["ReplayGuard", "ReplayGuardMiddleware"])
def test_record_true_without_a_store_is_still_refused(kind: str) -> None:
    fails(kind, ValueError, r"record=True needs a store", record=True)


@pytest.mark.parametrize(
    ("make", "hint"),
    [
        (lambda: ReplayGuard(InMemoryStore()), "Pass a store as store=..."),
        (lambda: ReplayGuardMiddleware("guard.json"), "GuardConfig.from_file"),
        (lambda: ReplayGuardCallbackHandler(InMemoryStore()), "Pass a store as store=..."),
    ],
)
def test_something_else_in_the_config_place_is_refused(make: Any, hint: str) -> None:
    with pytest.raises(TypeError, match=r"^config must be a GuardConfig or a dict") as caught:
        make()
    assert hint in str(caught.value)


def test_good_options_are_accepted_and_kept(tmp_path: Any) -> None:
    store = InMemoryStore()
    guard = ReplayGuard(
        {"max_repeats": 2}, store=store, namespace=["replay_guard", "t.1"], record=store
    )
    assert guard.config == GuardConfig(max_repeats=2)
    assert guard.namespace == ("replay_guard", "t.1")
    assert guard.records is not None
    handler = guard.callback_handler(max_threads=10)
    assert handler.config is guard.config
    middleware = ReplayGuardMiddleware(store=store, namespace=("replay_guard", "t"), record=True)
    assert middleware.guard.records is not None
