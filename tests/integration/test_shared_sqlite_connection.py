"""One SQLite connection for the checkpointer and the guard's store (docs/adopting.md's setup).

`SqliteSaver(conn)` and `SqliteStore(conn)` lock the connection with locks of their own, so the
saver's commits used to land inside a guard claim's transaction when a model made two tool
calls at once (`cannot commit - no transaction is active`, issue 32 seam 9). Each test runs
many agent turns of two parallel unsafe sends and counts the sends in a file.
"""

from __future__ import annotations

import asyncio
import sqlite3
import warnings
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.errors import ReplayGuardWarning
from langgraph_replay_guard.storage.ledger_io import ReplayLedger
from langgraph_replay_guard.testing import ScriptedChatModel

RUNS = 30
ASYNC_RUNS = 150


def _sender(log: Path):  # type: ignore[no-untyped-def]
    @tool
    def send(to: str) -> str:
        """Send an email."""
        with log.open("a", encoding="utf-8") as file:
            file.write(to + "\n")
        return f"sent to {to}"

    return send


def _async_sender(log: Path):  # type: ignore[no-untyped-def]
    @tool
    async def send(to: str) -> str:
        """Send an email."""
        with log.open("a", encoding="utf-8") as file:
            file.write(to + "\n")
        return f"sent to {to}"

    return send


PEOPLE = ("ann", "bob")


def _sends(turn: int, people: tuple[str, ...] = PEOPLE) -> ScriptedChatModel:
    return ScriptedChatModel(script=[[("send", {"to": f"{who}{turn}"}) for who in people]])


def _check(log: Path, runs: int, people: tuple[str, ...] = PEOPLE) -> None:
    sent = log.read_text(encoding="utf-8").split()
    assert sorted(sent) == sorted(f"{who}{turn}" for turn in range(runs) for who in people)


def test_shared_connection_parallel_unsafe_calls_sync(tmp_path: Path) -> None:
    log = tmp_path / "sent.txt"
    send = _sender(log)
    conn = sqlite3.connect(tmp_path / "agent.sqlite", check_same_thread=False)
    saver, store = SqliteSaver(conn), SqliteStore(conn)
    store.setup()
    guard = ReplayGuard(tools={"send": "unsafe"}, store=store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReplayGuardWarning)
        for turn in range(RUNS):
            agent = create_agent(
                _sends(turn), [send], middleware=[guard.middleware()], checkpointer=saver
            )
            config = {"configurable": {"thread_id": f"t{turn}"}}
            out = agent.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
            assert out["messages"][-1].content == "Done."
    _check(log, RUNS)
    rows = ReplayLedger(store).rows("t0")
    assert sorted(row.status for row in rows) == ["completed", "completed"]
    conn.close()


def test_shared_connection_parallel_unsafe_calls_async(tmp_path: Path) -> None:
    aiosqlite = pytest.importorskip("aiosqlite")
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    log = tmp_path / "sent.txt"
    send = _async_sender(log)

    async def run() -> None:
        conn = await aiosqlite.connect(tmp_path / "agent.sqlite")
        saver, store = AsyncSqliteSaver(conn), AsyncSqliteStore(conn)
        await store.setup()
        guard = ReplayGuard(tools={"send": "unsafe"}, store=store)
        try:
            # aiosqlite runs one statement at a time, so the race is rarer than the sync one
            # (on 25e8adf it failed within 4 to 50 turns): more turns.
            for turn in range(ASYNC_RUNS):
                agent = create_agent(
                    _sends(turn), [send], middleware=[guard.middleware()], checkpointer=saver
                )
                config = {"configurable": {"thread_id": f"t{turn}"}}
                ask = {"messages": [HumanMessage("go")]}
                out = await agent.ainvoke(ask, config, durability="sync")
                assert out["messages"][-1].content == "Done."
        finally:
            await conn.close()

    asyncio.run(run())
    _check(log, ASYNC_RUNS)
