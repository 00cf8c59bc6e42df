"""The async integrations do no blocking I/O on the event loop (issue 32, seam 11).

LangGraph's server (`langgraph dev`, the platform runtime) runs graphs under `blockbuster`,
which raises `BlockingError` for a blocking call on the event loop. The guard's first claim
in a process read the host's facts (`/proc`, `os.readlink`) on the loop: the first unsafe call
failed, and the claims after it named no machine and no start time. Each test runs a guarded
graph's `ainvoke` under `blockbuster` with its default checks (stricter than the server's).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import ReplayGuard, ReplayUnsafeError
from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.storage.ledger_io import ReplayLedger
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph
from tests import warm_children

blockbuster = pytest.importorskip("blockbuster")
pytestmark = pytest.mark.filterwarnings("ignore::langgraph_replay_guard.errors.ReplayGuardWarning")


@pytest.fixture(autouse=True)
def _fresh_process_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    # As in a new server process: this process's facts not read yet.
    monkeypatch.setattr(owners, "REGISTRY", owners.OwnerRegistry())


def _tools(sent: list[str], *, fail: bool = False, claims: Any = None) -> list[Any]:
    @tool
    async def send(to: str) -> str:
        """Send an email."""
        sent.append(to)  # the effect (kept in memory: a file write would block the loop)
        if claims is not None:
            claims()
        if fail:
            msg = "connection dropped after the send"
            raise ConnectionError(msg)
        return f"sent to {to}"

    return [send]


def _two_sends() -> ScriptedChatModel:
    return ScriptedChatModel(script=[[("send", {"to": "ann"}), ("send", {"to": "bob"})]])


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


def _owners_in_flight(store: Any, thread_id: str, seen: list[Any]) -> Any:
    """Collects the owners of the thread's claims while the tool runs (inside its body)."""

    def look() -> None:
        seen.extend(row.owner for row in ReplayLedger(store).rows(thread_id))

    return look


def test_guarded_create_agent_ainvoke_does_not_block_the_loop() -> None:
    from langchain.agents import create_agent

    sent: list[str] = []
    store = InMemoryStore()
    guard = ReplayGuard(tools={"send": "unsafe"}, store=store)
    agent = create_agent(
        _two_sends(), _tools(sent), middleware=[guard.middleware()], checkpointer=InMemorySaver()
    )
    config = _config()

    async def run() -> Any:
        with blockbuster.blockbuster_ctx():
            return await agent.ainvoke(
                {"messages": [HumanMessage("go")]}, config, durability="sync"
            )

    out = asyncio.run(run())
    assert sorted(sent) == ["ann", "bob"]
    assert out["messages"][-1].content == "Done."


def test_guarded_tool_node_on_async_sqlite_does_not_block_the_loop(tmp_path: Path) -> None:
    aiosqlite = pytest.importorskip("aiosqlite")
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    sent: list[str] = []
    config = _config()

    async def run() -> Any:
        async with (
            aiosqlite.connect(tmp_path / "guard.db") as guard_db,
            aiosqlite.connect(tmp_path / "checkpoints.db") as saver_db,
        ):
            store = AsyncSqliteStore(guard_db)
            saver = AsyncSqliteSaver(saver_db)
            await store.setup()
            await saver.setup()
            guard = ReplayGuard(tools={"send": "unsafe"}, store=store)
            graph = agent_graph(_two_sends(), _tools(sent), guard=guard, checkpointer=saver)
            with blockbuster.blockbuster_ctx():
                out = await graph.ainvoke(
                    {"messages": [HumanMessage("go")]}, config, durability="sync"
                )
            rows = [row.status for row in await _arows(store, config)]
            return out, rows

    out, rows = asyncio.run(run())
    assert sorted(sent) == ["ann", "bob"]
    assert out["messages"][-1].content == "Done."
    assert rows == ["completed", "completed"]


async def _arows(store: Any, config: dict[str, Any]) -> list[Any]:
    from langgraph_replay_guard.replay.ledger import LedgerEntry

    ledger = ReplayLedger(store)
    items = await store.asearch(ledger.namespace(config["configurable"]["thread_id"]))
    return [LedgerEntry.from_value(item.key, item.value) for item in items]


def test_unknown_outcome_resume_refuses_without_blocking_the_loop() -> None:
    from langchain.agents import create_agent

    sent: list[str] = []
    store = InMemoryStore()
    guard = ReplayGuard(tools={"send": "unsafe"}, store=store)
    model = ScriptedChatModel(script=[[("send", {"to": "ann"})]])
    config = _config()
    seen: list[Any] = []
    look = _owners_in_flight(store, config["configurable"]["thread_id"], seen)
    agent = create_agent(
        model,
        _tools(sent, fail=True, claims=look),
        middleware=[guard.middleware()],
        checkpointer=InMemorySaver(),
    )

    async def run() -> None:
        with blockbuster.blockbuster_ctx():
            with pytest.raises(ConnectionError):
                await agent.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")
            with pytest.raises(ReplayUnsafeError):
                await agent.ainvoke(None, config, durability="sync")

    asyncio.run(run())
    assert sent == ["ann"]  # sent once; the resume did not send again
    # The claim named this machine and this process's start time, so a restarted server
    # would see its holder dead at once (not trust a 900 s lease).
    (owner,) = seen
    assert owner["machine"] == owners.machine_id()
    assert owner["pst"] is not None


_CRASHING_CHILD = """
import os, signal, sqlite3, sys
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore
from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel

folder = sys.argv[1]

@tool
def send(to: str) -> str:
    \"\"\"Send an email.\"\"\"
    with open(os.path.join(folder, "sent.txt"), "a") as file:
        file.write(to + "\\n")
    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies after the effect
    return "sent"

store = SqliteStore(sqlite3.connect(os.path.join(folder, "guard.db"), check_same_thread=False))
store.setup()
saver = SqliteSaver(sqlite3.connect(os.path.join(folder, "ckpt.db"), check_same_thread=False))
guard = ReplayGuard(tools={"send": "unsafe"}, store=store)
model = ScriptedChatModel(script=[[("send", {"to": "ann"})]])
agent = create_agent(model, [send], middleware=[guard.middleware()], checkpointer=saver)
agent.invoke(
    {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t"}}, durability="sync"
)
"""


def test_a_dead_local_holder_is_checked_without_blocking_the_loop(tmp_path: Path) -> None:
    # The resume reads the dead holder's process start time (`/proc/<pid>/stat`) on the loop.
    import sys

    aiosqlite = pytest.importorskip("aiosqlite")
    from langchain.agents import create_agent
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    child = warm_children.run(
        [sys.executable, "-c", _CRASHING_CHILD, str(tmp_path)], check=False, timeout=120
    )
    assert child.returncode == -9  # SIGKILL inside the tool, after the effect
    sent_file = tmp_path / "sent.txt"
    assert sent_file.read_text().split() == ["ann"]

    @tool
    async def send(to: str) -> str:
        """Send an email."""
        sent_file.write_text(sent_file.read_text() + to + "\n")  # never reached
        return "sent"

    async def run() -> None:
        async with (
            aiosqlite.connect(tmp_path / "guard.db") as guard_db,
            aiosqlite.connect(tmp_path / "ckpt.db") as saver_db,
        ):
            guard = ReplayGuard(tools={"send": "unsafe"}, store=AsyncSqliteStore(guard_db))
            agent = create_agent(
                ScriptedChatModel(script=[]),
                [send],
                middleware=[guard.middleware()],
                checkpointer=AsyncSqliteSaver(saver_db),
            )
            config = {"configurable": {"thread_id": "t"}}
            with blockbuster.blockbuster_ctx(), pytest.raises(ReplayUnsafeError):
                await agent.ainvoke(None, config, durability="sync")

    asyncio.run(run())
    assert sent_file.read_text().split() == ["ann"]
