"""The per-step fast paths give exactly what the checked paths give, and fall back when unsure.

The reducer takes the guard's own writes (`own_update`) without checking them again, and the
tool calls of a step reuse the plan their model call made (`DecisionCache.planned`). Each is kept
honest here: same value as the slow path, and the slow path whenever a value, a write or a
message is not the very object the shortcut was made for.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.decisions.engine import call_facts, fold_settings, make_event
from langgraph_replay_guard.decisions.memo import IdentityMemo
from langgraph_replay_guard.decisions.state import Event, merge_guard_state, own_update
from langgraph_replay_guard.integrations.batches import ToolCallBatch
from langgraph_replay_guard.integrations.calls import DecisionCache

CONFIG = GuardConfig(tools={"write": "unsafe"}, max_repeats=2)
CFG = fold_settings(CONFIG)


def event(tool: str, arg: int, outcome: str = "success", batch: str | None = None) -> Event:
    facts = call_facts(CONFIG, tool, {"id": arg})
    reason = "duplicate" if outcome == "denied" else None
    return make_event(
        facts,
        outcome,  # type: ignore[arg-type]
        result=f"result {arg}",
        reason=reason,
        turn="h1",
        batch=batch,
        batch_size=1 if batch else None,
    )


# Reads, a repeat, a denial, a failure, a write (a new epoch), a cycle A-B-A-B, one per batch.
HISTORY = [
    ("read", 1, "success"),
    ("read", 2, "success"),
    ("read", 1, "success"),
    ("read", 1, "denied"),
    ("read", 3, "failure"),
    ("write", 9, "success"),
    ("read", 4, "success"),
    ("read", 5, "success"),
    ("read", 4, "success"),
    ("read", 5, "success"),
]


def fold(checked: bool) -> list[dict[str, Any]]:
    """The channel value after each write: the guard's own writes, or plain JSON copies."""
    value: Any = None
    values = []
    for index, (tool, arg, outcome) in enumerate(HISTORY):
        update = own_update(CFG, [event(tool, arg, outcome, batch=f"ai-{index}")])
        if checked:
            update = json.loads(json.dumps(update))  # not the guard's object: checked
        value = merge_guard_state(value, update)
        values.append(copy.deepcopy(value))
    return values


def test_the_guards_own_writes_fold_to_the_values_checked_writes_give():
    own, checked = fold(checked=False), fold(checked=True)
    assert own == checked
    last = own[-1]
    assert last["cycle"] is not None  # the history did reach the cycle layer
    assert last["totals"] == {"calls": 10, "blocked": 1, "aborts": 0}


def test_an_own_write_changed_after_it_was_built_is_checked_again():
    base = merge_guard_state(None, own_update(CFG, [event("read", 1, batch="ai-0")]))
    update = own_update(CFG, [event("read", 2, batch="ai-1")])
    update["events"] = [{"k": "not a recorded call"}]  # replaced after the guard built it
    merged = merge_guard_state(base, update)
    assert "ignored a write" in (merged["notice"] or "")
    assert merged["totals"]["calls"] == 1  # nothing of the bad write was folded


def test_a_value_changed_in_place_is_checked_again_under_an_own_write():
    value = merge_guard_state(None, own_update(CFG, [event("read", 1, batch="ai-0")]))
    value["counters"] = "not a map"  # a node mutating the channel value in place
    merged = merge_guard_state(value, own_update(CFG, [event("read", 2, batch="ai-1")]))
    assert "malformed" in (merged["notice"] or "")
    assert isinstance(merged["counters"], dict)


def test_a_step_merged_twice_gives_one_value():
    # LangGraph merges a step's writes twice (a conditional edge's read, then the channel).
    value = merge_guard_state(None, own_update(CFG, [event("read", 1, batch="ai-0")]))
    update = own_update(CFG, [event("read", 2, batch="ai-1")])
    assert merge_guard_state(value, update) is merge_guard_state(value, update)


def plan_setup() -> tuple[DecisionCache, dict[str, Any], AIMessage, list[Any]]:
    ai = AIMessage(
        content="",
        id="ai-1",
        tool_calls=[
            {"name": "read", "args": {"id": 1}, "id": "c1"},
            {"name": "read", "args": {"id": 1}, "id": "c2"},
        ],
    )
    value = merge_guard_state(None, own_update(CFG, [event("read", 7, batch="ai-0")]))
    cache = DecisionCache()
    cache.decide(CONFIG, value, ToolCallBatch(ai, "h1"), ("read", "write"))
    return cache, value, ai, [HumanMessage("go", id="h1"), ai]


def test_tool_calls_reuse_the_plan_of_their_model_call():
    cache, value, _ai, messages = plan_setup()
    found = cache.decided(value, messages, "c2", ("read", "write"))
    assert found is not None
    plan, planned = found
    assert planned.index == 1
    assert planned.decision is not None
    assert planned.decision.reason == "duplicate"
    assert plan.batch.turn == "h1"


def test_the_plan_is_not_reused_for_another_value_message_call_or_tool_set():
    cache, value, ai, messages = plan_setup()
    tools = ("read", "write")
    assert cache.decided(copy.deepcopy(value), messages, "c1", tools) is None
    answered = [*messages, ToolMessage("x", tool_call_id="c1")]
    assert cache.decided(value, answered, "c1", tools) is None
    assert cache.decided(value, [messages[0], copy.copy(ai)], "c1", tools) is None
    assert cache.decided(value, messages, "c9", tools) is None
    assert cache.decided(value, messages, "c1", ("read",)) is None


def test_an_identity_memo_knows_only_the_very_objects_it_met_and_keeps_at_most_its_cap():
    memo: IdentityMemo[str] = IdentityMemo(2)
    first, second, third = {"a": 1}, {"a": 1}, {"a": 1}
    memo.remember(first, "first")
    memo.remember(second, "second")
    assert memo.recall(first) == "first"
    assert memo.recall({"a": 1}) is None  # equal is not the same
    memo.remember(third, "third")
    assert memo.recall(first) is None  # the oldest went
    assert [memo.recall(second), memo.recall(third)] == ["second", "third"]
