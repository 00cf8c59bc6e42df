"""The guard keeps no more of a result than the model was given (issue 33, item 5).

`PIIMiddleware(apply_to_tool_results=True)` redacts tool results in its `before_model`,
after the tools node ran and after the guard recorded the call. A real `create_agent`
agent, a real tool whose result holds an email address, a SQLite checkpointer and store on
files: the raw checkpoints and store rows are read back as bytes.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import PIIMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import GUARD_CHANNEL, GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel

os.environ["LANGSMITH_TRACING"] = "false"

EMAIL = "jane.doe@example.com"
RESULT = f"Customer C1: Jane Doe, contact {EMAIL}, plan gold"


def _agent_run(
    tmp_path: Path, *, guard_first: bool, config: GuardConfig
) -> tuple[list[dict[str, Any]], bytes, list[ToolMessage], ScriptedChatModel, list[int]]:
    """Run the agent; return every checkpoint's values, the store file, the tool messages."""
    runs: list[int] = []

    @tool
    def lookup_customer(customer_id: str) -> str:
        """Look up a customer."""
        runs.append(1)
        return RESULT

    # The same read twice: the second is answered from the earlier result (a preview).
    model = ScriptedChatModel(
        script=[
            [("lookup_customer", {"customer_id": "C1"})],
            [("lookup_customer", {"customer_id": "C1"})],
        ]
    )
    pii = PIIMiddleware("email", strategy="redact", apply_to_tool_results=True)
    with (
        SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver,
        SqliteStore.from_conn_string(str(tmp_path / "store.db")) as store,
    ):
        store.setup()
        guard = ReplayGuard(config, store=store)
        stack = [guard.middleware(), pii] if guard_first else [pii, guard.middleware()]
        agent = create_agent(
            model, [lookup_customer], middleware=stack, checkpointer=saver, store=store
        )
        cfg = {"configurable": {"thread_id": "private"}}
        out = agent.invoke({"messages": [HumanMessage("who is C1?")]}, cfg)
        checkpoints = [c.checkpoint["channel_values"] for c in saver.list(cfg)]
    store_bytes = b"".join(_rows(tmp_path / "store.db"))
    messages = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    return checkpoints, store_bytes, messages, model, runs


def _rows(db: Path) -> list[bytes]:
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


@pytest.mark.parametrize("guard_first", [True, False], ids=["guard_first", "guard_last"])
def test_channel_holds_no_more_of_a_result_than_the_messages(
    tmp_path: Path, guard_first: bool
) -> None:
    checkpoints, store_bytes, messages, model, runs = _agent_run(
        tmp_path, guard_first=guard_first, config=GuardConfig()
    )
    assert runs == [1], "the identical read ran once"
    assert all(EMAIL not in str(m.content) for m in messages), "PII redacted the results"
    latest = checkpoints[0]
    assert EMAIL not in _messages_text(latest)
    assert EMAIL not in _channel_text(latest), "the thread's state keeps the redacted preview"
    # The model never saw the address, not even in the duplicate's answer.
    assert all(EMAIL not in str(m.content) for seen in model.seen for m in seen)
    # From the first model call after the redaction on, no checkpoint's channel holds more
    # than its messages. (The tools node's own checkpoint holds the raw result in its
    # messages too; the redactor's step is the one between, see docs/replay-safety.md.)
    redacted_from = max(
        i for i, values in enumerate(checkpoints) if EMAIL in _messages_text(values)
    )
    for values in checkpoints[: redacted_from - 1]:
        if EMAIL in _channel_text(values):
            assert EMAIL in _messages_text(values)
    # A pure read leaves no ledger row: the store holds nothing of the result.
    assert EMAIL.encode() not in store_bytes


@pytest.mark.parametrize("guard_first", [True, False], ids=["guard_first", "guard_last"])
def test_digest_only_channel_holds_no_result_text(tmp_path: Path, guard_first: bool) -> None:
    config = GuardConfig(store_previews=False)
    checkpoints, store_bytes, messages, _, runs = _agent_run(
        tmp_path, guard_first=guard_first, config=config
    )
    assert runs == [1], "dedup still works on digests"
    duplicate = messages[-1]
    assert "identical" in str(duplicate.content).lower() or "already" in str(
        duplicate.content
    ).lower()
    for values in checkpoints:
        text = _channel_text(values)
        assert "Jane" not in text, "no result text in any checkpoint's channel"
        assert "Customer C1" not in text
    assert EMAIL.encode() not in store_bytes
