"""The core decisions that bound model calls after an abort: come-backs and escalation."""

from __future__ import annotations

import pytest

from langgraph_replay_guard import GuardConfig, LoopAbortedError, Verdict
from langgraph_replay_guard.decisions.engine import (
    call_facts,
    decide,
    loop_error,
    make_event,
)
from langgraph_replay_guard.decisions.state import fold_events, new_state
from langgraph_replay_guard.decisions.texts import ROUTE_FIX, STOP_IGNORED


def attempt(config, state, batch, *, turn="h1", tool="t"):
    """Decide one call of `batch` and record it as the integrations do."""
    facts = call_facts(config, tool, {})
    decision = decide(state, facts, config, turn=turn, batch=batch)
    if decision.executes:
        event = make_event(facts, "success", result="same", batch=batch, turn=turn, batch_size=1)
    else:
        aborts = decision.verdict is Verdict.ABORT
        event = make_event(
            facts,
            "denied",
            reason=decision.reason,
            abort=aborts,
            batch=batch,
            turn=turn,
            batch_size=1,
        )
    fold_events(state, [event], {})
    return decision


def stopped_state(config):
    state = new_state()
    for n in range(config.max_repeats + 1):
        decision = attempt(config, state, f"ai-{n}")
    assert (decision.verdict, decision.reason) == (Verdict.ABORT, "repeat_limit")
    return state


def test_a_later_batch_of_the_same_turn_is_a_come_back():
    config = GuardConfig(tools={"t": "unsafe"})
    state = stopped_state(config)
    facts = call_facts(config, "other", {})
    decision = decide(state, facts, config, turn="h1", batch="ai-later")
    assert (decision.verdict, decision.reason) == (Verdict.ABORT, STOP_IGNORED)


def test_the_stopped_batch_itself_run_again_gets_its_first_answer():
    config = GuardConfig(tools={"t": "unsafe"})
    state = stopped_state(config)
    facts = call_facts(config, "t", {})
    stopped_batch = f"ai-{config.max_repeats}"
    assert decide(state, facts, config, turn="h1", batch=stopped_batch).reason == "stopped"
    assert decide(state, facts, config, turn="h1").reason == "stopped", "batch unknown"


def test_a_new_turn_after_a_stop_starts_afresh():
    config = GuardConfig(tools={"t": "unsafe"})
    state = stopped_state(config)
    facts = call_facts(config, "t", {})
    assert decide(state, facts, config, turn="h2", batch="ai-next").verdict is Verdict.ALLOW


def test_continue_escalates_after_max_repeats_more_blocked_attempts():
    config = GuardConfig(tools={"t": "unsafe"}, exit_behavior="continue")
    state = new_state()
    verdicts = [attempt(config, state, f"ai-{n}").verdict for n in range(2 * 3 + 1)]
    assert verdicts == [Verdict.ALLOW] * 3 + [Verdict.DENY] * 3 + [Verdict.ABORT]
    assert state["stop"]["reason"] == "repeat_limit"
    assert attempt(config, state, "ai-more").reason == STOP_IGNORED


def test_the_come_back_error_names_the_one_line_fix():
    config = GuardConfig(tools={"t": "unsafe"})
    state = stopped_state(config)
    decision = decide(state, call_facts(config, "t", {}), config, turn="h1", batch="ai-x")
    error = loop_error(decision)
    assert isinstance(error, LoopAbortedError)
    assert ROUTE_FIX in str(error)
    assert (error.tool, error.reason) == ("t", STOP_IGNORED)
    with pytest.raises(LoopAbortedError, match="ReplayGuardMiddleware"):
        raise loop_error(decision, fix="Use ReplayGuardMiddleware.")
