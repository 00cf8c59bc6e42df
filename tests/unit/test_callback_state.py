"""The callback handler's bookkeeping: refusal error shape, run tree, scope table."""

from __future__ import annotations

import uuid

from langchain_core.exceptions import OutputParserException
from langgraph.prebuilt.tool_node import ToolInvocationError
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import GuardConfig, ReplayGuardError
from langgraph_replay_guard.integrations.callbacks import ToolCallBlockedError
from langgraph_replay_guard.integrations.callbacks.decisions import CallbackDecider, Refusal
from langgraph_replay_guard.integrations.callbacks.scopes import RunTree, ScopeTable


def test_refusal_error_is_what_both_executors_hand_to_the_model():
    error = ToolCallBlockedError("Not executed: dup", tool_name="lookup")
    assert isinstance(error, ToolInvocationError)  # ToolNode's default answers it
    assert isinstance(error, OutputParserException)  # AgentExecutor's parsing-error path
    assert isinstance(error, ReplayGuardError)
    assert (str(error), error.message, error.observation, error.llm_output) == (
        "Not executed: dup",
    ) * 4
    assert error.send_to_llm is True


def test_run_tree_scopes_nesting_and_cap():
    tree = RunTree(cap=3)
    root, tool, inner = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    info, _ = tree.start(root, None, {"thread_id": 7})
    assert info.scope == ("thread", "7")
    tool_info, nested = tree.start(tool, root, {"thread_id": 7}, tool=True)
    assert (tool_info.root, tool_info.inside_tool, nested) == (root, True, False)
    inner_info, nested = tree.start(inner, tool, {"thread_id": 7}, tool=True)
    assert nested
    assert inner_info.inside_tool
    orphan, _ = tree.start(uuid.uuid4(), None, None)
    assert orphan.scope[0] == "run"
    assert tree.end(root) is None, "the oldest run was evicted beyond the cap"
    assert tree.end(inner) is inner_info


def test_scope_table_evicts_least_recently_used_and_keeps_stored_threads():
    store = InMemoryStore()
    guard = CallbackDecider(GuardConfig(), ScopeTable(2, store, ("ns",)))
    for thread in ("a", "b"):
        key = ("thread", thread)
        guard.batch(key, f"batch-{thread}", [("lookup", {"id": 1}, "c1")])
        admitted = guard.tool_start(
            key, ("lookup", {"id": 1}, "c1"), fallback_id="x", fallback_turn="t"
        )
        assert not isinstance(admitted, Refusal)
        guard.record(admitted, "success", "result")
    guard.scopes.get(("thread", "a"))  # a is now the most recently used
    guard.scopes.get(("thread", "c"))
    assert guard.scopes.peek(("thread", "b")) is None
    assert guard.view(("thread", "b")).totals.calls == 1, "the store still has the evicted thread"
    assert store.get(("ns",), "b") is not None
    assert guard.view(("run", "unknown")).totals.calls == 0
