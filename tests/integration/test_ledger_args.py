"""Every argument a tool accepts is ledgered (issue 27 item 7): sets, tuples, bytes, datetimes."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.replay.ledger import LedgerEntry
from langgraph_replay_guard.testing import ScriptedChatModel

from .replay_graphs import replay_graph

pytestmark = pytest.mark.filterwarnings(
    "ignore:langgraph-replay-guard.*durable checkpointer:langgraph_replay_guard.ReplayGuardWarning"
)

WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
ARGS: dict[str, Any] = {
    "tags": {"b", "a"},
    "pair": (1, 2),
    "blob": b"\x00\xff",
    "when": WHEN,
    "ratio": float("nan"),
    "note": "lone \ud800 surrogate and a NUL \x00",
}


def _rows(store: Any) -> list[LedgerEntry]:
    rows = []
    for namespace in store.list_namespaces(limit=1000):
        for item in store.search(namespace, limit=1000):
            if isinstance(item.value, dict) and "status" in item.value and "v" in item.value:
                rows.append(LedgerEntry.from_value(item.key, item.value))
    return rows


def test_an_unsafe_tool_with_set_bytes_and_datetime_arguments_runs_once_and_is_ledgered(
    any_store,
):
    runs: list[dict[str, Any]] = []

    @tool
    def label(tags: set[str], pair: tuple[int, int], blob: bytes, when: dt.datetime,
              ratio: float, note: str) -> str:  # fmt: skip
        """Label items (a side effect)."""
        runs.append({"tags": tags, "pair": pair, "blob": blob, "when": when, "note": note})
        return "labelled"

    calls = iter([[("label", ARGS)], "done"])
    model = ScriptedChatModel(script=[lambda _messages: next(calls)] * 2)
    guard = ReplayGuard(GuardConfig(tools={"label": "unsafe"}), store=any_store)
    graph = replay_graph(guard, model, [label], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}
    out = graph.invoke({"messages": [HumanMessage("label them")]}, config, durability="sync")

    assert [m.content for m in out["messages"] if m.type == "tool"] == ["labelled"]
    assert len(runs) == 1
    (row,) = [row for row in _rows(any_store) if row.tool == "label"]
    assert row.status == "completed"
    # The row keeps the arguments as the tool got them, for the person resolving it.
    assert row.args["tags"] == {"a", "b"}
    assert row.args["pair"] == (1, 2)
    assert row.args["blob"] == b"\x00\xff"
    assert row.args["when"] == WHEN
    assert row.args["note"] == ARGS["note"]
