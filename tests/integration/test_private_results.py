"""The guard keeps no more of a result than the model was given (issue 33, item 5).

`PIIMiddleware(apply_to_tool_results=True)` redacts tool results in its `before_model`,
after the tools node ran and after the guard recorded the call. A real `create_agent`
agent, a real tool whose result holds an email address, a SQLite checkpointer and store on
files: the raw checkpoints and store rows are read back as bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import PIIMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import GUARD_CHANNEL, GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel

os.environ["LANGSMITH_TRACING"] = "false"

EMAIL = "jane.doe@example.com"
RESULT = f"Customer C1: Jane Doe, contact {EMAIL}, plan gold"


@contextlib.contextmanager
def _backend(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Any, Any, Callable[[], bytes]]]:
    """A checkpointer and a store on real files or a real server, and a dump of their rows."""
    if kind == "sqlite":
        with (
            SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver,
            SqliteStore.from_conn_string(str(tmp_path / "store.db")) as store,
        ):
            store.setup()
            yield saver, store, lambda: b"".join(_sqlite_cells(tmp_path / "store.db"))
        return
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    uri = request.getfixturevalue("pg_uri")
    with PostgresSaver.from_conn_string(uri) as saver, PostgresStore.from_conn_string(uri) as store:
        saver.setup()
        store.setup()

        def dump() -> bytes:
            with psycopg.connect(uri) as conn:
                return b"".join(
                    str(row).encode()
                    for table in _STORE_TABLES
                    for row in conn.execute(f"SELECT * FROM {table}")
                )

        yield saver, store, dump


_STORE_TABLES = ("store",)
"""PostgresStore's table of items (its vector table is not created without an index)."""


def _lookup_tool(runs: list[int]) -> BaseTool:
    @tool
    def lookup_customer(customer_id: str) -> str:
        """Look up a customer."""
        runs.append(1)
        return RESULT

    return lookup_customer


def _agent_run(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    *,
    guard_first: bool,
    config: GuardConfig,
    backend: str = "sqlite",
    asynchronous: bool = False,
) -> tuple[list[dict[str, Any]], bytes, list[ToolMessage], ScriptedChatModel, list[int]]:
    """Run the agent; return every checkpoint's values, the store's rows, the tool messages."""
    runs: list[int] = []
    # The same call twice: the second is answered from the earlier result (a preview for a
    # read, the ledger's recorded outcome for an unsafe call).
    model = ScriptedChatModel(
        script=[
            [("lookup_customer", {"customer_id": "C1"})],
            [("lookup_customer", {"customer_id": "C1"})],
        ]
    )
    pii = PIIMiddleware("email", strategy="redact", apply_to_tool_results=True)
    given = {"messages": [HumanMessage("who is C1?")]}
    cfg: Any = {"configurable": {"thread_id": "private"}}

    def agent(saver: Any, store: Any) -> Any:
        guard = ReplayGuard(config, store=store)
        stack = [guard.middleware(), pii] if guard_first else [pii, guard.middleware()]
        return create_agent(
            model, [_lookup_tool(runs)], middleware=stack, checkpointer=saver, store=store
        )

    if asynchronous:
        # The async hooks (`awrap_model_call`, the async ledger driver) on async backends.
        out, checkpoints = asyncio.run(_arun(tmp_path, agent, given, cfg))
        store_bytes = b"".join(_sqlite_cells(tmp_path / "store.db"))
    else:
        with _backend(backend, tmp_path, request) as (saver, store, dump):
            out = agent(saver, store).invoke(given, cfg, durability="sync")
            checkpoints = [c.checkpoint["channel_values"] for c in saver.list(cfg)]
            store_bytes = dump()
    messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    return checkpoints, store_bytes, messages, model, runs


async def _arun(
    tmp_path: Path, agent: Callable[[Any, Any], Any], given: Any, cfg: Any
) -> tuple[Any, list[dict[str, Any]]]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    async with (
        AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver,
        AsyncSqliteStore.from_conn_string(str(tmp_path / "store.db")) as store,
    ):
        await store.setup()
        out = await agent(saver, store).ainvoke(given, cfg, durability="sync")
        checkpoints = [c.checkpoint["channel_values"] async for c in saver.alist(cfg)]
    return out, checkpoints


def _sqlite_cells(db: Path) -> list[bytes]:
    """Every cell of every table of a SQLite file, as bytes (read as the file holds them)."""
    conn = sqlite3.connect(db)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        cells: list[bytes] = []
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                cells.extend(c if isinstance(c, bytes) else str(c).encode() for c in row)
        return cells
    finally:
        conn.close()


def _channel_text(values: dict[str, Any]) -> str:
    return json.dumps(values.get(GUARD_CHANNEL), default=str)


def _messages_text(values: dict[str, Any]) -> str:
    return json.dumps([str(m.content) for m in values.get("messages", [])])


READ = GuardConfig()
UNSAFE = GuardConfig(tools={"lookup_customer": "unsafe"})


@pytest.mark.parametrize("guard_first", [True, False], ids=["guard_first", "guard_last"])
@pytest.mark.parametrize("config", [READ, UNSAFE], ids=["read", "unsafe"])
@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_guard_holds_no_more_of_a_result_than_the_messages(
    tmp_path: Path,
    request: pytest.FixtureRequest,
    guard_first: bool,
    config: GuardConfig,
    asynchronous: bool,
) -> None:
    checkpoints, store_bytes, messages, model, runs = _agent_run(
        tmp_path, request, guard_first=guard_first, config=config, asynchronous=asynchronous
    )
    # An identical read runs once; a side effect may be asked again (a new call).
    assert runs == ([1] if config is READ else [1, 1])
    assert all(EMAIL not in str(m.content) for m in messages), "PII redacted the results"
    latest = checkpoints[0]
    assert EMAIL not in _messages_text(latest)
    assert EMAIL not in _channel_text(latest), "the thread's state keeps the redacted preview"
    # The model never saw the address, not even in the duplicate's answer.
    assert all(EMAIL not in str(m.content) for seen in model.seen for m in seen)
    # No checkpoint's channel holds the address, the redactor's own step's included (it
    # held the raw preview on b3e3935): the tools node records a digest, and the model node
    # adds the preview of what the model is given.
    for i, values in enumerate(checkpoints):  # newest first
        assert EMAIL not in _channel_text(values), f"checkpoint {i} keeps it"
    # The ledger rows were rewritten to what the model was given (a read's row and an unsafe
    # call's, found through its lookup row, alike).
    assert b"[REDACTED_EMAIL]" in store_bytes
    assert EMAIL.encode() not in store_bytes


@pytest.mark.parametrize("guard_first", [True, False], ids=["guard_first", "guard_last"])
def test_no_checkpoint_in_the_history_holds_a_raw_preview(
    tmp_path: Path, guard_first: bool
) -> None:
    """Every state of the thread (`get_state_history`): the guard channel never held the raw
    result, not even in the checkpoint of the redacting middleware's own step (b3e3935 wrote
    the preview in the tools node and dropped it one step later, at the model call)."""
    runs: list[int] = []
    model = ScriptedChatModel(script=[[("lookup_customer", {"customer_id": "C1"})], "done"])
    pii = PIIMiddleware("email", strategy="redact", apply_to_tool_results=True)
    cfg: Any = {"configurable": {"thread_id": "history"}}
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        guard = ReplayGuard(GuardConfig())
        stack = [guard.middleware(), pii] if guard_first else [pii, guard.middleware()]
        agent = create_agent(model, [_lookup_tool(runs)], middleware=stack, checkpointer=saver)
        agent.invoke({"messages": [HumanMessage("who is C1?")]}, cfg, durability="sync")
        history = list(agent.get_state_history(cfg))
        steps = {h.metadata.get("step") if h.metadata else None for h in history}
    assert runs == [1]
    assert len(history) >= 5, steps  # input, model, tools, the redactor's step, model
    for snapshot in history:
        assert EMAIL not in _channel_text(snapshot.values), snapshot.metadata
    # The digest is there from the tools node on (the loop layers read it).
    assert any(GUARD_CHANNEL in h.values for h in history)


def test_the_preview_of_an_unchanged_result_is_written_with_the_guards_next_write(
    tmp_path: Path,
) -> None:
    """Nothing redacts: the channel gets the preview, cut from the message the model read,
    with the guard's next write: the tools node's when the model's answer has tool calls
    (the model call writes nothing), the model call's own for a final answer."""
    runs: list[int] = []

    @tool
    def lookup_customer(customer_id: str) -> str:
        """Look up a customer."""
        runs.append(1)
        return f"{customer_id}: {RESULT}"

    model = ScriptedChatModel(
        script=[
            [("lookup_customer", {"customer_id": "C1"})],
            [("lookup_customer", {"customer_id": "C2"})],
            "done",
        ]
    )
    cfg: Any = {"configurable": {"thread_id": "plain"}}
    first, second = f"C1: {RESULT}"[:20], f"C2: {RESULT}"[:20]
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        guard = ReplayGuard(GuardConfig(result_preview_chars=20, store_previews=True))
        agent = create_agent(
            model, [lookup_customer], middleware=[guard.middleware()], checkpointer=saver
        )
        agent.invoke({"messages": [HumanMessage("who are C1 and C2?")]}, cfg, durability="sync")
        history = list(reversed(list(agent.get_state_history(cfg))))  # oldest first
    assert runs == [1, 1]
    by_step = {h.metadata["step"]: h for h in history if h.metadata}
    texts = {step: _channel_text(h.values) for step, h in by_step.items()}
    # Steps: 1 model (C1), 2 tools, 3 model (C2), 4 tools, 5 model (done).
    assert first not in texts[2], "the tools node kept a digest of its own result"
    assert texts[3] == texts[2], "the model call with tool calls wrote nothing"
    assert first in texts[4], "the tools node's write carried the previews the model read"
    assert second not in texts[4]
    assert second in texts[5], "a final answer: the model call wrote the preview itself"
    assert f"C2: {RESULT}"[:21] not in texts[5]


@pytest.mark.parametrize("guard_first", [True, False], ids=["guard_first", "guard_last"])
def test_digest_only_channel_holds_no_result_text(
    tmp_path: Path, request: pytest.FixtureRequest, guard_first: bool
) -> None:
    config = GuardConfig(store_previews=False)
    checkpoints, store_bytes, messages, _, runs = _agent_run(
        tmp_path, request, guard_first=guard_first, config=config
    )
    assert runs == [1], "dedup still works on digests"
    duplicate = messages[-1]
    assert (
        "identical" in str(duplicate.content).lower() or "already" in str(duplicate.content).lower()
    )
    for values in checkpoints:
        text = _channel_text(values)
        assert "Jane" not in text, "no result text in any checkpoint's channel"
        assert "Customer C1" not in text
    assert EMAIL.encode() not in store_bytes


@pytest.mark.postgres
@pytest.mark.parametrize("guard_first", [True, False], ids=["guard_first", "guard_last"])
def test_postgres_rows_hold_what_the_model_was_given(
    tmp_path: Path, request: pytest.FixtureRequest, guard_first: bool
) -> None:
    checkpoints, store_bytes, messages, _, runs = _agent_run(
        tmp_path, request, guard_first=guard_first, config=UNSAFE, backend="postgres"
    )
    assert runs == [1, 1]
    assert all(EMAIL not in str(m.content) for m in messages)
    assert EMAIL not in _channel_text(checkpoints[0])
    assert b"[REDACTED_EMAIL]" in store_bytes
    assert EMAIL.encode() not in store_bytes


def test_a_replay_gives_back_what_the_model_was_given(tmp_path: Path) -> None:
    # A fork from before the unsafe call: the ledger answers it (the tool does not run
    # again) with the row the model node rewrote, so not even the fork's tools-node
    # checkpoint holds the raw result.
    runs: list[int] = []
    model = ScriptedChatModel(script=[[("lookup_customer", {"customer_id": "C1"})], "ok", "ok"])
    pii = PIIMiddleware("email", strategy="redact", apply_to_tool_results=True)
    with (
        SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver,
        SqliteStore.from_conn_string(str(tmp_path / "store.db")) as store,
    ):
        store.setup()
        guard = ReplayGuard(UNSAFE, store=store)
        agent = create_agent(
            model,
            [_lookup_tool(runs)],
            middleware=[guard.middleware(), pii],
            checkpointer=saver,
            store=store,
        )
        cfg: Any = {"configurable": {"thread_id": "private"}}
        agent.invoke({"messages": [HumanMessage("who is C1?")]}, cfg, durability="sync")
        seen = {c.config["configurable"]["checkpoint_id"] for c in saver.list(cfg)}
        before = next(h for h in agent.get_state_history(cfg) if h.next == ("tools",))
        out = agent.invoke(None, before.config, durability="sync")
        fork = [
            c.checkpoint["channel_values"]
            for c in saver.list(cfg)
            if c.config["configurable"]["checkpoint_id"] not in seen
        ]
    assert runs == [1], "the fork's call was answered from the ledger"
    replayed = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert replayed[-1].text == RESULT.replace(EMAIL, "[REDACTED_EMAIL]")
    assert fork, "the fork wrote checkpoints"
    assert all(EMAIL not in _messages_text(values) for values in fork)
    assert all(EMAIL not in _channel_text(values) for values in fork)
