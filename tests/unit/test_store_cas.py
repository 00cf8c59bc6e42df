"""The ledger's compare-and-set: atomic on the shipped stores, a clear warning elsewhere."""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Iterable
from typing import Any

import pytest
from langgraph.store.base import BaseStore, Op, Result
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import ReplayGuardWarning
from langgraph_replay_guard.ledger import Update
from langgraph_replay_guard.store_cas import atomic_kind, compare_and_set

NS = ("replay_guard", "ledger", "t1")
IDX = ("replay_guard", "ledger_index", "t1")


class ForwardingStore(BaseStore):
    """A store that forwards to another one, as `langgraph dev`'s batching store does."""

    def __init__(self, inner: BaseStore) -> None:
        self._store = inner

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._store.batch(ops)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._store.abatch(ops)


class OpaqueStore(ForwardingStore):
    """A store the guard cannot see into (no known inner store)."""

    def __init__(self, inner: BaseStore) -> None:
        self._inner = inner

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._inner.batch(ops)


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> BaseStore:
    if request.param == "memory":
        return InMemoryStore()
    conn = sqlite3.connect(tmp_path / "s.db", check_same_thread=False, isolation_level=None)
    sqlite_store = SqliteStore(conn)
    sqlite_store.setup()
    return sqlite_store


def _claim(expect_exists: bool, rev: str | None, new_rev: str) -> Update:
    return Update(
        NS,
        "tools/ai-1/call-1",
        {"v": 1, "status": "started", "rev": new_rev},
        expect_exists=expect_exists,
        expect_rev=rev,
        also=((IDX, "tc/call-1", {"v": 1, "key": "tools/ai-1/call-1"}),),
    )


def test_only_one_of_two_claims_on_an_absent_row_is_written(store):
    first = compare_and_set(store, _claim(False, None, "a"))
    second = compare_and_set(store, _claim(False, None, "b"))
    assert first == (True, {"v": 1, "status": "started", "rev": "a"})
    assert second[0] is False
    assert second[1]["rev"] == "a"  # the loser sees the winner's row
    item = store.get(NS, "tools/ai-1/call-1")
    assert item is not None
    assert item.value["rev"] == "a"
    assert store.get(IDX, "tc/call-1") is not None  # written with the claim


def test_a_claim_on_a_changed_row_fails_and_writes_nothing(store):
    compare_and_set(store, _claim(False, None, "a"))
    store.delete(IDX, "tc/call-1")
    assert compare_and_set(store, _claim(True, "stale", "b"))[0] is False
    assert store.get(IDX, "tc/call-1") is None  # the extra rows go with the claim only
    assert compare_and_set(store, _claim(True, "a", "b"))[0] is True


def test_shipped_stores_and_wrappers_are_atomic(tmp_path):
    assert atomic_kind(InMemoryStore()) == "memory"
    assert atomic_kind(ForwardingStore(InMemoryStore())) == "memory"
    conn = sqlite3.connect(tmp_path / "s.db", check_same_thread=False, isolation_level=None)
    assert atomic_kind(SqliteStore(conn)) == "sqlite"
    assert atomic_kind(ForwardingStore(SqliteStore(conn))) == "sqlite"


def test_an_unknown_store_warns_once_that_it_is_not_safe_for_several_workers():
    store = OpaqueStore(InMemoryStore())
    assert atomic_kind(store) == "unknown"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert compare_and_set(store, _claim(False, None, "a"))[0] is True
        assert compare_and_set(store, _claim(False, None, "b"))[0] is False
    messages = [str(w.message) for w in caught if issubclass(w.category, ReplayGuardWarning)]
    assert len(messages) == 1
    assert "OpaqueStore" in messages[0]
    assert "two worker processes" in messages[0]
