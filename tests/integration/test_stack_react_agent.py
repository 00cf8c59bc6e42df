"""`langgraph.prebuilt.create_react_agent` (deprecated: `create_agent`) with a guarded ToolNode."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from typing import Annotated, Any, NotRequired

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph.warnings import LangGraphDeprecatedSinceV10

from langgraph_replay_guard import LoopAbortedError, ReplayGuard, merge_guard_state
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.stacks import counted_tools, stop_of

os.environ["LANGSMITH_TRACING"] = "false"

from langgraph.prebuilt.chat_agent_executor import AgentState, create_react_agent


class GuardedState(AgentState):
    """create_react_agent's state plus the guard channel: without it the guard keeps nothing."""

    replay_guard: NotRequired[Annotated[dict[str, Any], merge_guard_state]]


def react_agent(guard: ReplayGuard, runs: Counter[str], **kwargs: Any):
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50)
    node = guard.wrap(ToolNode([counted_tools(runs)["lookup"]]))
    # Deprecated: calling it warns (which would fail a run under -W error); assert it.
    with pytest.warns(LangGraphDeprecatedSinceV10, match="create_agent"):
        agent = create_react_agent(model, node, checkpointer=InMemorySaver(), **kwargs)
    return agent, model


def invoke(agent, mode: str, thread: str):
    payload = {"messages": [HumanMessage("who is P1?")]}
    config = {"configurable": {"thread_id": thread}}
    if mode == "sync":
        return agent.invoke(payload, config)
    return asyncio.run(agent.ainvoke(payload, config))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_exit_behavior_error_stops_the_loop_at_the_abort(mode):
    runs: Counter[str] = Counter()
    guard = ReplayGuard(exit_behavior="error")
    agent, model = react_agent(guard, runs, state_schema=GuardedState)
    with pytest.raises(LoopAbortedError, match="'lookup'") as raised:
        invoke(agent, mode, f"react-error-{mode}")
    assert (raised.value.tool, raised.value.reason) == ("lookup", "repeat_limit")
    assert runs["lookup"] == 1
    assert model.calls == 4


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_exit_behavior_end_cannot_end_gracefully_and_errors_on_the_next_call(mode):
    # create_react_agent goes back to the model after its tools node (a static edge you
    # cannot change): the guard answers the loop, records the stop, answers the model's
    # first come-back too, and when the model asks for tools once more it raises instead
    # of looping until the recursion limit. (With a prompt built by guard.system_prompt
    # the run ends before that model call: test_come_back_history.py.)
    runs: Counter[str] = Counter()
    guard = ReplayGuard()
    agent, model = react_agent(guard, runs, state_schema=GuardedState, name="researcher")
    with pytest.raises(LoopAbortedError, match="static edge") as raised:
        invoke(agent, mode, f"react-end-{mode}")
    # The message names the fix a create_react_agent user can apply (its edges are fixed).
    assert "guard.system_prompt(state)" in str(raised.value)
    assert runs["lookup"] == 1
    assert model.calls == 6  # two more than under create_agent
    # The stops the tools node wrote before that: final messages named like the agent's.
    state = agent.get_state({"configurable": {"thread_id": f"react-end-{mode}"}})
    stops = [m for m in state.values["messages"] if isinstance(m, AIMessage) and stop_of(m)]
    assert [(stop_of(m), m.name) for m in stops] == [
        ("repeat_limit", "researcher"),
        ("stop_ignored", "researcher"),
    ]
    assert guard.inspect(state).stop_reason == "repeat_limit"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_state_without_the_guard_channel_is_not_silently_unguarded(mode):
    runs: Counter[str] = Counter()
    agent, model = react_agent(ReplayGuard(), runs)  # no state_schema: the default AgentState
    # The first tool call is refused with an error that names the channel and the fix;
    # nothing ran (a guard that kept no count would let the 50-call loop run).
    with pytest.raises(ValueError, match=r"no 'replay_guard' channel.*state_schema="):
        invoke(agent, mode, f"react-no-channel-{mode}")
    assert runs["lookup"] == 0
    assert model.calls == 1
