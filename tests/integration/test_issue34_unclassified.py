"""Issue 34 item 7: tools that nothing classified are listed, and refused on request.

A tool without a `tools` entry, a toolkit or MCP annotations runs as `default_policy`
(`pure`: deduplicated, and run again after a crash) with no word. Now each guard lists such
tools once in an `UnclassifiedToolsWarning` where it first sees them (with the class a shipped
toolkit would give), `check(agent)` lists them whenever asked, the crash test's report names
them, and `GuardConfig(require_classes=True)` refuses to run them.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.prebuilt import ToolNode
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import (
    GuardConfig,
    ReplayGuard,
    ReplayGuardCallbackHandler,
    ToolPolicy,
    UnclassifiedToolsWarning,
)
from langgraph_replay_guard.testing import ScriptedChatModel, crashtest

GRAPHS = "tests.integration.crashtest_graphs"
CONFIG = GuardConfig(tools={"send_email": "unsafe"})


def _tools(effects: list[str]) -> list[BaseTool]:
    def made(name: str, metadata: dict[str, Any] | None = None) -> BaseTool:
        def body(key: str) -> str:
            effects.append(f"{name}:{key}")
            return f"{name} done"

        found = tool(name, description=f"The {name} tool.")(body)
        found.metadata = metadata
        return found

    return [
        made("send_email"),  # classified by `tools`
        made("lookup"),  # nothing classifies it
        made("write_file"),  # the deepagents toolkit would, but it is not named
        made("mcp_search", {"readOnlyHint": True, "idempotentHint": None}),  # MCP annotations
    ]


def _listed(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UnclassifiedToolsWarning)]


def test_wrap_lists_the_unclassified_tools_once_per_guard() -> None:
    guard = ReplayGuard(CONFIG)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        guard.wrap(ToolNode(_tools([]), name="tools"))
        guard.wrap(ToolNode(_tools([]), name="more_tools"))  # the same tools: not again
    (text,) = _listed(caught)
    assert "2 tool(s) of ToolNode 'tools' have no replay class" in text
    assert "'lookup', 'write_file' (toolkits=('deepagents',) gives 'idempotent')" in text
    assert "send_email" not in text
    assert "mcp_search" not in text
    assert "default_policy (replay='pure'" in text
    assert "GuardConfig(tools={...})" in text
    assert "require_classes=True" in text
    # Once per guard, not per process: another guard says it again (test order never matters).
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        ReplayGuard(CONFIG).wrap(ToolNode(_tools([])))
    assert len(_listed(again)) == 1


def test_a_fully_classified_guard_says_nothing() -> None:
    config = GuardConfig(tools={"send_email": "unsafe", "lookup": "pure"}, toolkits=("deepagents",))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ReplayGuard(config).wrap(ToolNode(_tools([])))
    assert _listed(caught) == []
    # A configuration that sets default_policy itself chose a class for every other tool.
    chosen = GuardConfig(default_policy=ToolPolicy(replay="unsafe"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ReplayGuard(chosen).wrap(ToolNode(_tools([])))
    assert _listed(caught) == []


@pytest.mark.parametrize("guard_at", ["alone", "first", "last"])
def test_create_agent_lists_them_at_the_first_model_call(guard_at: str) -> None:
    from langchain.agents.middleware import ModelCallLimitMiddleware

    effects: list[str] = []
    guard = ReplayGuard(CONFIG, store=InMemoryStore()).middleware()
    other = ModelCallLimitMiddleware(run_limit=20)
    middleware = {"alone": [guard], "first": [guard, other], "last": [other, guard]}[guard_at]
    script = [[("lookup", {"key": "a"})], "Found a.", [("lookup", {"key": "b"})]]
    model = ScriptedChatModel(script=script)
    with warnings.catch_warnings(record=True) as built:
        warnings.simplefilter("always")
        agent = create_agent(model, _tools(effects), middleware=middleware)
    # `create_agent` tells a middleware nothing at build time: the first model call does.
    assert _listed(built) == []
    with warnings.catch_warnings(record=True) as ran:
        warnings.simplefilter("always")
        agent.invoke({"messages": [HumanMessage("go")]})
        agent.invoke({"messages": [HumanMessage("again")]})
    (text,) = _listed(ran)  # once
    assert "of the agent have no replay class" in text
    assert "'lookup'" in text
    assert effects == ["lookup:a", "lookup:b"]  # off by default: they run as before


def test_the_callback_handler_lists_them_at_check_and_at_the_first_call() -> None:
    effects: list[str] = []
    agent = create_agent(ScriptedChatModel(script=[[("lookup", {"key": "a"})]]), _tools(effects))
    handler = ReplayGuardCallbackHandler(CONFIG)
    for _ in range(2):  # asked for: listed each time
        with pytest.warns(UnclassifiedToolsWarning, match="'lookup', 'write_file'"):
            handler.check(agent)
    unchecked = ReplayGuardCallbackHandler(CONFIG)
    with pytest.warns(UnclassifiedToolsWarning, match="1 tool\\(s\\) of the agent .* 'lookup'"):
        agent.invoke({"messages": [HumanMessage("go")]}, {"callbacks": [unchecked]})
    assert effects == ["lookup:a"]


def _require(**fields: Any) -> GuardConfig:
    return GuardConfig(**{"tools": {"send_email": "unsafe"}, **fields, "require_classes": True})


def test_require_classes_refuses_at_wrap_and_at_the_first_model_call() -> None:
    with pytest.raises(ValueError, match="require_classes=True\\) refuses") as raised:
        ReplayGuard(_require()).wrap(ToolNode(_tools([])))
    text = str(raised.value)
    assert "ToolNode 'tools' has 2: 'lookup', 'write_file'" in text
    assert "GuardConfig(tools={'lookup': 'unsafe', 'write_file': 'unsafe'})" in text
    effects: list[str] = []
    model = ScriptedChatModel(script=[[("lookup", {"key": "a"})]])
    agent = create_agent(model, _tools(effects), middleware=[ReplayGuard(_require()).middleware()])
    with pytest.raises(ValueError, match="the agent has 2: 'lookup'"):
        agent.invoke({"messages": [HumanMessage("go")]})
    assert model.calls == 0  # before the model is called
    with pytest.raises(ValueError, match="the agent has 2: 'lookup'"):
        ReplayGuardCallbackHandler(_require()).check(create_agent(model, _tools(effects)))
    assert effects == []


def test_require_classes_refuses_the_call_in_the_callback_handler() -> None:
    effects: list[str] = []
    model = ScriptedChatModel(script=[[("lookup", {"key": "a"})], [("send_email", {"key": "b"})]])
    agent = create_agent(model, _tools(effects))
    out = agent.invoke(
        {"messages": [HumanMessage("go")]}, {"callbacks": [ReplayGuardCallbackHandler(_require())]}
    )
    refused = out["messages"][2]
    assert "require_classes=True) refuses" in refused.content
    assert "'lookup'" in refused.content
    assert effects == ["send_email:b"]  # the classified tool ran, the unclassified one never


def test_require_classes_runs_a_fully_classified_agent() -> None:
    effects: list[str] = []
    config = _require(toolkits=("deepagents",), tools={"send_email": "unsafe", "lookup": "pure"})
    model = ScriptedChatModel(script=[[("lookup", {"key": "a"})]])
    agent = create_agent(model, _tools(effects), middleware=[ReplayGuard(config).middleware()])
    agent.invoke({"messages": [HumanMessage("go")]})
    assert effects == ["lookup:a"]


def test_the_crash_test_report_lists_them() -> None:
    report = crashtest(
        f"{GRAPHS}:restarting_script", points=["before_claim"], allow_rerun=["get_details_by_id"]
    )
    assert report.unclassified == ("get_details_by_id",)
    assert "unclassified tools" in report.render()
    assert "get_details_by_id" in report.render().split("unclassified tools")[1]
    assert report.to_json()["unclassified"] == ["get_details_by_id"]
