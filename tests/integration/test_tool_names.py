"""A policy for a tool name the agent does not have is a warning that names the closest tool."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import (
    GuardConfig,
    ReplayGuard,
    ReplayGuardCallbackHandler,
    ReplayGuardMiddleware,
    ReplayGuardWarning,
    ToolPolicy,
    UnclassifiedToolsWarning,
)
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import SYSTEM, ToolRuns, build_custom_graph, make_tools

# The typo: "transfer_to_human_agent" for the real, unsafe "transfer_to_human_agents".
# Warned, not refused (strict_tool_names=False; test_issue27_policy.py has the error).
TYPO = GuardConfig(
    tools={"transfer_to_human_agent": "unsafe", "book_reservation": "unsafe"},
    strict_tool_names=False,
)
# Correct names, and classes that need no store or durable checkpointer (no other warning).
CORRECT = GuardConfig(
    tools={
        "transfer_to_human_agents": "idempotent",
        "check_network_status": ToolPolicy(volatile=True),
    }
)
TRANSFER = [("transfer_to_human_agents", {"summary": "refund"})]
ASK = {"messages": [HumanMessage("I want a human.")]}


def policy_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, ReplayGuardWarning)
        and not issubclass(w.category, UnclassifiedToolsWarning)  # issue 34 item 7's list
        and "GuardConfig(tools=" in str(w.message)
    ]


def assert_names_the_typo(messages: list[str], where: str) -> None:
    assert len(messages) == 1, messages  # once, and only for the misspelt name
    (text,) = messages
    assert text.startswith(
        f"GuardConfig(tools=...) has a policy for 'transfer_to_human_agent', but {where} "
    )
    assert "did you mean 'transfer_to_human_agents'?" in text
    assert "gets default_policy (replay='pure')" in text


def test_custom_graph_warns_when_the_tools_node_is_built():
    guard = ReplayGuard(TYPO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_custom_graph(guard, ScriptedChatModel(), make_tools(ToolRuns()))
    assert_names_the_typo(policy_warnings(caught), "ToolNode 'tools'")

    # Once per name: guarding another node with the same guard does not repeat it.
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        guard.wrap(ToolNode(make_tools(ToolRuns()), name="more_tools"))
    assert policy_warnings(again) == []


def test_guard_wrap_warns_with_the_node_name():
    guard = ReplayGuard(TYPO)
    with pytest.warns(ReplayGuardWarning, match="but ToolNode 'my_tools' has no such tool"):
        guard.wrap(ToolNode(make_tools(ToolRuns()), name="my_tools"))


def test_a_name_like_no_tool_lists_the_tools():
    guard = ReplayGuard(GuardConfig(tools={"refund_payment": "unsafe"}))
    with pytest.warns(ReplayGuardWarning) as caught:
        guard.tool_node(make_tools(ToolRuns())[:2])
    (text,) = policy_warnings(list(caught))
    assert "(its tools: 'get_details_by_id', 'transfer_to_human_agents')" in text
    assert "fix the name in tools={...} or remove it" in text


def test_the_typo_warning_is_about_a_real_risk():
    # What the warning prevents: the real unsafe tool is deduplicated as a pure read.
    runs = ToolRuns()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReplayGuardWarning)
        graph = build_custom_graph(
            ReplayGuard(TYPO), ScriptedChatModel(script=[TRANSFER, TRANSFER]), make_tools(runs)
        )
        graph.invoke(ASK)
    assert runs["transfer_to_human_agents"] == 1, "the second transfer was answered as a dup"


def run_agent(middleware: Any = None, callbacks: Any = None) -> Any:
    model = ScriptedChatModel(script=[TRANSFER, "A human will call you."])
    agent = create_agent(
        model,
        make_tools(ToolRuns()),
        system_prompt=SYSTEM,
        middleware=[middleware] if middleware else [],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t"}, "callbacks": callbacks or []}
    if callbacks:
        callbacks[0].check(agent)
    return agent, agent.invoke(ASK, config)


def test_create_agent_middleware_warns_at_the_first_model_call():
    middleware = ReplayGuardMiddleware(TYPO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent, _ = run_agent(middleware)
        agent.invoke(ASK, {"configurable": {"thread_id": "t2"}})  # a second run: no repeat
    assert_names_the_typo(policy_warnings(caught), "the agent")


def test_create_agent_middleware_warns_in_async_runs():
    import asyncio

    middleware = ReplayGuard(TYPO).middleware()
    model = ScriptedChatModel(script=["Hello."])
    agent = create_agent(model, make_tools(ToolRuns()), middleware=[middleware])
    with pytest.warns(ReplayGuardWarning, match="did you mean 'transfer_to_human_agents'"):
        asyncio.run(agent.ainvoke(ASK))


def test_callback_handler_check_warns():
    handler = ReplayGuardCallbackHandler(TYPO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_agent(callbacks=[handler])
    assert_names_the_typo(policy_warnings(caught), "the agent")


@pytest.mark.parametrize("integration", ["wrap", "middleware", "callback_handler"])
def test_a_correct_configuration_gives_no_warning(integration: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        guard = ReplayGuard(CORRECT, store=InMemoryStore())
        if integration == "wrap":
            model = ScriptedChatModel(script=[TRANSFER, "ok"])
            graph = build_custom_graph(guard, model, make_tools(ToolRuns()))
            graph.invoke(ASK, {"configurable": {"thread_id": "t"}})
        elif integration == "middleware":
            run_agent(guard.middleware())
        else:
            run_agent(callbacks=[guard.callback_handler()])
    # The policy names are right; that the tools without one are listed (issue 34 item 7) is
    # another warning, checked in test_issue34_unclassified.py.
    found = [w for w in caught if issubclass(w.category, ReplayGuardWarning)]
    assert [w for w in found if not issubclass(w.category, UnclassifiedToolsWarning)] == []
