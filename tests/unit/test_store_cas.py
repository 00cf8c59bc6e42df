"""The ledger's compare-and-set: atomic on the shipped stores, a clear warning elsewhere."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import warnings
from collections.abc import Generator, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langgraph.store.base import BaseStore, Op, Result
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import ReplayGuardWarning
from langgraph_replay_guard.replay.ledger import Read, Update
from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan
from langgraph_replay_guard.storage.store_cas import (
    acompare_and_set,
    atomic_kind,
    compare_and_set,
    prepare,
)

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


# -- a connection in Python's default transaction mode ------------------------------------------
# `sqlite3.connect(path, check_same_thread=False)` (isolation_level "") makes Python begin a
# transaction by itself before an INSERT; SqliteStore.setup() leaves one open, and a BEGIN after
# it failed with "cannot start a transaction within a transaction".


def _committed(path: Any, namespace: tuple[str, ...], key: str) -> Any:
    """The row as another connection sees it: only what was committed."""
    other = sqlite3.connect(path)
    try:
        row = other.execute(
            "SELECT value FROM store WHERE prefix = ? AND key = ?", (".".join(namespace), key)
        ).fetchone()
    finally:
        other.close()
    return None if row is None else json.loads(row[0])


def _read_plan() -> Generator[Any, Any, Any]:
    values = yield Read(((NS, "tools/ai-1/call-1"),))
    return values[0]


@pytest.mark.parametrize("setup_first", [False, True], ids=["guard-sets-up", "user-set-up"])
def test_a_default_mode_sqlite_connection_claims_atomically_and_durably(tmp_path, setup_first):
    path = tmp_path / "s.db"
    store = SqliteStore(sqlite3.connect(path, check_same_thread=False))
    if setup_first:
        store.setup()  # leaves the transaction of its migration rows open
    assert run_plan(store, _read_plan()) is None  # a plain read first: the failing path
    assert compare_and_set(store, _claim(False, None, "a"))[0] is True
    assert compare_and_set(store, _claim(False, None, "b"))[0] is False
    assert _committed(path, NS, "tools/ai-1/call-1")["rev"] == "a"  # committed, not pending
    assert _committed(path, IDX, "tc/call-1") is not None
    assert not store.conn.in_transaction
    store.put(("mine",), "k", {"v": 1})  # the store itself works on the connection too
    assert store.get(("mine",), "k").value == {"v": 1}
    assert run_plan(store, _read_plan())["rev"] == "a"


def test_default_mode_connections_racing_for_one_claim_write_it_once(tmp_path):
    path = tmp_path / "s.db"
    stores = [
        SqliteStore(sqlite3.connect(path, check_same_thread=False, timeout=30)) for _ in range(6)
    ]
    # Set the file up first through the guard (which commits what setup() leaves open): the
    # others' setup() would otherwise wait on that open transaction's lock.
    prepare(stores[0])
    barrier = threading.Barrier(len(stores))

    def claim(index: int) -> bool:
        barrier.wait()
        return compare_and_set(stores[index], _claim(False, None, f"w{index}"))[0]

    with ThreadPoolExecutor(len(stores)) as pool:
        written = list(pool.map(claim, range(len(stores))))
    assert written.count(True) == 1
    winner = f"w{written.index(True)}"
    assert _committed(path, NS, "tools/ai-1/call-1")["rev"] == winner


@pytest.mark.parametrize("setup_first", [False, True], ids=["guard-sets-up", "user-set-up"])
def test_a_default_mode_aiosqlite_connection_claims_atomically_and_durably(tmp_path, setup_first):
    import aiosqlite
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    path = tmp_path / "s.db"

    async def scenario() -> None:
        conn = await aiosqlite.connect(path)
        try:
            store = AsyncSqliteStore(conn)
            if setup_first:
                await store.setup()
            assert await arun_plan(store, _read_plan()) is None
            assert (await acompare_and_set(store, _claim(False, None, "a")))[0] is True
            assert (await acompare_and_set(store, _claim(False, None, "b")))[0] is False
            assert _committed(path, NS, "tools/ai-1/call-1")["rev"] == "a"
            await store.aput(("mine",), "k", {"v": 1})
            assert (await store.aget(("mine",), "k")).value == {"v": 1}
        finally:
            await conn.close()

    asyncio.run(scenario())


def test_a_sync_default_mode_store_in_an_async_run(tmp_path):
    path = tmp_path / "s.db"
    store = SqliteStore(sqlite3.connect(path, check_same_thread=False))
    store.setup()

    async def scenario() -> None:
        assert await arun_plan(store, _read_plan()) is None
        assert (await acompare_and_set(store, _claim(False, None, "a")))[0] is True

    asyncio.run(scenario())
    assert _committed(path, NS, "tools/ai-1/call-1")["rev"] == "a"


def test_a_guarded_graph_on_default_mode_connections_keeps_its_ledger(tmp_path):
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver

    from langgraph_replay_guard import ReplayGuard
    from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

    sent: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    path = tmp_path / "guard.db"
    guard = ReplayGuard(
        tools={"send_email": "unsafe"},
        store=SqliteStore(sqlite3.connect(path, check_same_thread=False)),
    )
    saver = SqliteSaver(sqlite3.connect(tmp_path / "cp.db", check_same_thread=False))
    model = ScriptedChatModel(script=[[("send_email", {"to": "ann"})], "Sent."])
    graph = agent_graph(model, [send_email], guard=guard, checkpointer=saver)
    config = {"configurable": {"thread_id": "t1"}}
    out = graph.invoke({"messages": [("user", "email Ann")]}, config, durability="sync")
    assert sent == ["ann"]
    answer = next(m for m in out["messages"] if m.type == "tool")
    assert answer.status == "success", answer.content  # not a store error turned into a message
    rows = sqlite3.connect(path).execute(
        "SELECT value FROM store WHERE prefix = 'replay_guard.ledger.t1'"
    )
    assert [json.loads(value)["status"] for (value,) in rows] == ["completed"]


def test_a_sqlite_checkpointer_on_the_store_connection_shares_its_lock(tmp_path):
    # Issue 32, seam 9: the guard's transactions take the saver's lock on a shared connection
    # (and only there), so the saver's commits never land inside a claim.
    from langgraph.checkpoint.sqlite import SqliteSaver

    from langgraph_replay_guard.storage import store_cas

    shared = sqlite3.connect(tmp_path / "one.db", check_same_thread=False)
    store, saver = SqliteStore(shared), SqliteSaver(shared)
    store_cas.share_connection(store, saver)
    assert store_cas._outer_lock(store) is saver.lock

    other = SqliteStore(sqlite3.connect(tmp_path / "two.db", check_same_thread=False))
    store_cas.share_connection(other, saver)
    store_cas.share_connection(other, None)
    assert store_cas._outer_lock(other) is not saver.lock  # its own connection: no lock

    # While the saver holds its lock, a claim on the shared store waits for it.
    store.setup()
    op = Update(("ns",), "k", {"rev": "1"}, expect_exists=False, expect_rev=None)
    done = threading.Event()
    with saver.lock:
        worker = threading.Thread(target=lambda: (run_plan(store, _one(op)), done.set()))
        worker.start()
        assert not done.wait(0.3)
    worker.join(5)
    assert done.is_set()


def _one(op: Update) -> Generator[Any, Any, Any]:
    return (yield op)
