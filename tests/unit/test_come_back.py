"""The come-back rules without a graph: answered once, then refused; the stop keeps its reason.

A come-back is a batch of tool calls the model asks for after the guard stopped the run in the
same user turn (a graph with a static `tools -> agent` edge goes back to the model). The
integration tests run it in real graphs (test_come_back_history.py, test_send_fan_out.py).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END

from langgraph_replay_guard import GuardConfig, Verdict
from langgraph_replay_guard.decisions.engine import (
    fold_settings,
    ignored_stop_error,
    stop_was_ignored,
)
from langgraph_replay_guard.decisions.state import fold_events, new_state, settled
from langgraph_replay_guard.decisions.texts import STOP_IGNORED
from langgraph_replay_guard.integrations.answers import (
    ANSWER_MARK,
    STOPPED_MARK,
    abort_answer,
    blocked_answer,
)
from langgraph_replay_guard.integrations.batches import ToolCallBatch
from langgraph_replay_guard.integrations.calls import (
    BatchDecisions,
    decide_batch,
    executed_event,
    snapshot,
)
from langgraph_replay_guard.integrations.tool_node import route_after_tools
from langgraph_replay_guard.testing import tool_call

CONFIG = GuardConfig()
LOOKUP = ("lookup", {"id": "P1"})
THINK = ("think", {"thought": "again"})


def run_batch(
    state: dict[str, Any], batch_id: str, calls: list[tuple[str, dict[str, Any]]], turn: str
) -> tuple[BatchDecisions, list[ToolMessage | None]]:
    """Plan, answer and record one batch the way the guarded ToolNode does."""
    ai = AIMessage("", id=batch_id, tool_calls=[tool_call(name, args) for name, args in calls])
    batch = ToolCallBatch(ai, turn)
    plan = decide_batch(CONFIG, snapshot(state, batch_id), batch)
    events, answers = [], []
    for planned in plan.calls:
        answer: ToolMessage | None = None
        if plan.abort is not None:
            answer, recorded = abort_answer(planned, plan.abort, batch)
        elif planned.decision is not None and planned.decision.verdict is Verdict.ALLOW:
            recorded = [executed_event(CONFIG, planned, batch, "success", "P1: premium")]
        else:
            answer, recorded = blocked_answer(planned, batch)
        events += recorded
        answers.append(answer)
    fold_events(state, events, fold_settings(CONFIG))
    return plan, answers


def stopped_state() -> dict[str, Any]:
    """A turn whose fourth identical read stopped the run."""
    state = new_state()
    for i in range(1, 5):
        plan, _ = run_batch(state, f"ai-{i}", [LOOKUP], "h1")
    assert plan.abort is not None
    assert settled(state)["stop"]["reason"] == "repeat_limit"
    return state


def test_the_first_come_back_is_answered_and_recorded_the_second_is_refused():
    state = stopped_state()
    assert not stop_was_ignored(settled(state))

    plan, answers = run_batch(state, "ai-5", [LOOKUP, THINK], "h1")
    assert plan.stop_ignored is not None
    assert not plan.stop_was_ignored, "the first come-back: answer it"
    for answer in answers:
        assert answer is not None
        assert answer.status == "error"
        assert "had stopped this run" in answer.text
        assert "answer the user" in answer.text
        # Marked as the guard's own answer (export and eval skip it) and as a stopped batch.
        assert answer.response_metadata == {ANSWER_MARK: STOP_IGNORED, STOPPED_MARK: STOP_IGNORED}
    view = settled(state)
    assert view["stop"]["reason"] == "repeat_limit", "the stop keeps why the run was stopped"
    assert view["totals"]["aborts"] == 1, "a come-back does not stop the run again"
    assert [entry[1] for entry in view["blocked"][-2:]] == [STOP_IGNORED, STOP_IGNORED]
    assert stop_was_ignored(view)

    plan, _ = run_batch(state, "ai-6", [THINK], "h1")
    assert plan.stop_ignored is not None
    assert plan.stop_was_ignored, "the second come-back: the tools node raises"


def test_a_resumed_come_back_batch_gets_its_answers_again_and_records_nothing_new():
    state = stopped_state()
    run_batch(state, "ai-5", [LOOKUP], "h1")
    before = settled(state)
    plan, answers = run_batch(state, "ai-5", [LOOKUP], "h1")  # the same batch, re-run
    assert plan.abort is not None
    assert plan.stop_ignored is None, "not a come-back: the batch the guard answered"
    assert answers[0] is not None
    assert answers[0].response_metadata[STOPPED_MARK] == "stopped"
    assert settled(state)["blocked"] == before["blocked"]


def test_a_new_user_turn_ends_the_stop_and_the_come_back():
    state = stopped_state()
    run_batch(state, "ai-5", [LOOKUP], "h1")
    plan, answers = run_batch(state, "ai-6", [LOOKUP], "h2")
    assert plan.abort is None
    assert answers == [None], "the read runs again in the new turn"
    assert settled(state)["stop"] is None
    assert not stop_was_ignored(settled(state))


def test_the_error_after_an_answered_come_back_names_the_stop_and_the_fix():
    state = stopped_state()
    run_batch(state, "ai-5", [LOOKUP], "h1")
    error = ignored_stop_error(settled(state)["stop"])
    assert (error.reason, error.tool, error.count) == (STOP_IGNORED, "lookup", 4)
    assert 'guard.route_after_tools("agent")' in str(error)
    assert "history stays valid" in str(error)


def test_route_after_tools_ends_a_send_task_that_answered_a_stopped_batch():
    # A task started by Send sees its own writes only: no stop in its view of the channel,
    # but its answer is marked.
    route = route_after_tools("agent")
    ai = AIMessage("", id="ai-1", tool_calls=[tool_call(*THINK)])
    call_id = ai.tool_calls[0]["id"]
    marked = ToolMessage("Not executed", tool_call_id=call_id, status="error")
    marked.response_metadata[STOPPED_MARK] = "repeat_limit"
    plain = ToolMessage("ok", tool_call_id=call_id)
    history = [HumanMessage("hi", id="h1"), ai]
    assert route({"messages": [*history, marked], "replay_guard": new_state()}) == END
    assert route({"messages": [*history, plain], "replay_guard": new_state()}) == "agent"
