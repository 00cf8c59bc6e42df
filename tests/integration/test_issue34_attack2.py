"""Issue 34 items 4, 7, 8 attacked as merged: shapes the first tests did not cover.

- 4: one guard over several `create_agent` agents (the documented pattern for sub-agents and
  supervisor workers: one guard, one middleware per agent), the agent without the configured
  name built first. That is the two-`ToolNode` setup of the issue with agents: it must run.
- 7: `require_classes=True` must refuse an unclassified tool wherever the guard stands.
- 8: the guard's factories (`guard.middleware()`, `guard.callback_handler()`) refuse a
  `GuardConfig` option with a message that names where it goes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool

from langgraph_replay_guard import GuardConfig, ReplayGuard, ReplayGuardWarning
from langgraph_replay_guard.testing import ScriptedChatModel

# (the tool of the agent built first, the tool of the agent built next: named by the config)
PAIRS = [("get_order", "set_order"), ("send_email", "send_emails"), ("read_file", "write_file")]


def _tool(name: str, effects: list[str]) -> BaseTool:
    def body(key: str) -> str:
        effects.append(f"{name}:{key}")
        return f"{name} done for {key}"

    return tool(name, description=f"The {name} tool.")(body)


def _agent(guard: ReplayGuard, name: str, effects: list[str]) -> Any:
    model = ScriptedChatModel(script=[[(name, {"key": "1"})]])
    return create_agent(model, [_tool(name, effects)], middleware=[guard.middleware(name=name)])


@pytest.mark.parametrize("first_built", ["without_the_name", "with_the_name"])
@pytest.mark.parametrize(("other", "named"), PAIRS)
def test_one_guard_over_two_agents_runs_whichever_is_built_first(
    other: str, named: str, first_built: str
) -> None:
    # docs/using-it-with.md: "One ReplayGuard for the application ... one middleware per
    # agent". The guard cannot know at the first agent's build that the next has `named`.
    effects: list[str] = []
    guard = ReplayGuard(GuardConfig(tools={named: "unsafe"}))
    order = [other, named] if first_built == "without_the_name" else [named, other]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agents = {name: _agent(guard, name, effects) for name in order}
        for name in order:
            out = agents[name].invoke({"messages": [HumanMessage("go")]})
            assert out["messages"][-1].content == "Done."
    assert effects == [f"{name}:1" for name in order]
    near = [
        str(w.message)
        for w in caught
        if issubclass(w.category, ReplayGuardWarning) and f"policy for {named!r}" in str(w.message)
    ]
    assert near == []  # every agent is built before any runs: the guard knows the name


@pytest.mark.parametrize(("other", "named"), PAIRS)
def test_a_typo_in_one_agent_of_a_guard_stops_it_at_its_first_call(other: str, named: str) -> None:
    # The same guard and agent, but no agent has the configured name: a typo, stopped before
    # any tool runs, at every invoke until it is fixed.
    effects: list[str] = []
    guard = ReplayGuard(GuardConfig(tools={named: "unsafe"}))
    agent = _agent(guard, other, effects)
    for _ in range(2):
        with pytest.raises(ValueError, match=f"did you mean {other!r}") as raised:
            agent.invoke({"messages": [HumanMessage("go")]})
        assert "strict_tool_names=False" in str(raised.value)
    assert effects == []


def test_an_unclassified_tool_of_two_agents_is_listed_once_per_guard() -> None:
    from langgraph_replay_guard import UnclassifiedToolsWarning

    guard = ReplayGuard(GuardConfig(tools={"send_email": "unsafe"}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agents = [_agent(guard, "lookup", []) for _ in range(3)]  # a sub-agent each
        for agent in agents:
            agent.invoke({"messages": [HumanMessage("go")]})
    listed = [str(w.message) for w in caught if issubclass(w.category, UnclassifiedToolsWarning)]
    assert len(listed) == 1, listed
    assert "'lookup'" in listed[0]
