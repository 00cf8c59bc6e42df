"""Issue 27, items 8-12: a tool that never started, a misspelt policy name, states without the
guard channel, dataclass states with it, and polling with `volatile`."""

from __future__ import annotations

import asyncio
import os
import warnings
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph, add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.memory import InMemoryStore
from pydantic import BaseModel

from langgraph_replay_guard import (
    GuardConfig,
    ReplayGuard,
    ReplayGuardCallbackHandler,
    ReplayGuardWarning,
    ToolPolicy,
    merge_guard_state,
)
from langgraph_replay_guard.evaluation import evaluate_trajectories
from langgraph_replay_guard.testing import ScriptedChatModel

os.environ["LANGSMITH_TRACING"] = "false"


# --- 8: an error the framework raises before the tool body starts has no effect -------------


def test_an_async_only_unsafe_tool_run_through_invoke_is_free_to_run_again():
    sent: list[str] = []

    @tool
    async def send_mail(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return "sent"

    guard = ReplayGuard(GuardConfig(tools={"send_mail": "unsafe"}), store=InMemoryStore())
    model = ScriptedChatModel(script=[[("send_mail", {"to": "ann@example.com"})]])
    agent = create_agent(
        model, [send_mail], middleware=[guard.middleware()], checkpointer=InMemorySaver()
    )
    cfg: Any = {"configurable": {"thread_id": "async-only"}}
    with pytest.raises(NotImplementedError, match="does not support sync invocation"):
        agent.invoke({"messages": [HumanMessage("mail Ann")]}, cfg, durability="sync")
    assert sent == []  # the body never started

    # The resume runs it (async, this time): no unknown outcome, no `resolve` needed.
    out = asyncio.run(agent.ainvoke(None, cfg, durability="sync"))
    assert sent == ["ann@example.com"]
    assert out["messages"][-2].content == "sent"


# --- 9: a misspelt policy name is an error before any tool runs -----------------------------

TYPO = GuardConfig(tools={"send_email": "unsafe"})


def _mail_tool(sent: list[str]) -> Any:
    @tool
    def send_mail(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return "sent"

    return send_mail


def test_create_agent_with_a_misspelt_policy_name_fails_before_any_tool_runs():
    sent: list[str] = []
    model = ScriptedChatModel(script=[[("send_mail", {"to": "ann"})]])
    guard = ReplayGuard(TYPO)
    middleware = guard.middleware()
    agent = create_agent(model, [_mail_tool(sent)], middleware=[middleware])
    # At the first model call (not the build: one guard may guard several agents, and the
    # one with the configured name may be built next), before any tool runs.
    with pytest.raises(ValueError, match="did you mean 'send_mail'") as raised:
        agent.invoke({"messages": [HumanMessage("mail Ann")]})
    assert "strict_tool_names=False" in str(raised.value)
    assert sent == []


def test_guard_wrap_warns_and_the_callback_handler_refuses_a_misspelt_policy_name():
    # A wrapped node may be one of several that the guard guards (issue 34 item 4): a warning
    # naming both names, not an error.
    with pytest.warns(ReplayGuardWarning, match="'tools' has no such tool; did you mean 'send_m"):
        ReplayGuard(TYPO).wrap(ToolNode([_mail_tool([])]))
    agent = create_agent(ScriptedChatModel(), [_mail_tool([])])
    with pytest.raises(ValueError, match="did you mean 'send_mail'"):
        ReplayGuardCallbackHandler(TYPO).check(agent)


def test_strict_tool_names_false_only_warns():
    sent: list[str] = []
    config = GuardConfig(tools={"send_email": "unsafe"}, strict_tool_names=False)
    model = ScriptedChatModel(script=[[("send_mail", {"to": "ann"})]])
    agent = create_agent(model, [_mail_tool(sent)], middleware=[ReplayGuard(config).middleware()])
    with pytest.warns(ReplayGuardWarning, match="did you mean 'send_mail'"):
        agent.invoke({"messages": [HumanMessage("mail Ann")]})
    assert sent == ["ann"]


def test_a_name_near_a_tool_that_has_its_own_policy_is_only_a_warning():
    # `send_mails` is near `send_mail`, but `send_mail` has a policy: no tool lost its own.
    config = GuardConfig(tools={"send_mail": "unsafe", "send_mails": "unsafe"})
    with pytest.warns(ReplayGuardWarning, match="'send_mails'"):
        ReplayGuard(config).wrap(ToolNode([_mail_tool([])]))


# --- 10: every state kind without the channel gets the error before a tool runs -------------


class _PydanticNoChannel(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages]


@dataclass
class _DataclassNoChannel:
    messages: Annotated[list[AnyMessage], add_messages]


@dataclass
class _DataclassWithChannel:
    messages: Annotated[list[AnyMessage], add_messages]
    replay_guard: Annotated[Optional[dict[str, Any]], merge_guard_state] = None  # noqa: UP045


def _looping_graph(state: Any, runs: list[str], guard: ReplayGuard) -> Any:
    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        runs.append(q)
        return "the same answer"

    model = ScriptedChatModel.looping("lookup", {"q": "x"}, times=30)
    builder = StateGraph(state)
    builder.add_node("agent", lambda s: {"messages": [model.invoke(s.messages)]})
    builder.add_node("tools", guard.wrap(ToolNode([lookup])))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    return builder.compile()


@pytest.mark.parametrize("state", [_PydanticNoChannel, _DataclassNoChannel])
def test_a_pydantic_or_dataclass_state_without_the_channel_is_refused(state):
    runs: list[str] = []
    graph = _looping_graph(state, runs, ReplayGuard())
    with pytest.raises(ValueError, match="has no 'replay_guard' channel"):
        graph.invoke({"messages": [HumanMessage("x")]}, {"recursion_limit": 100})
    assert runs == []


def test_a_dataclass_state_with_the_channel_keeps_dedup_across_steps():
    runs: list[str] = []
    guard = ReplayGuard()
    out = _looping_graph(_DataclassWithChannel, runs, guard).invoke(
        {"messages": [HumanMessage("x")]}, {"recursion_limit": 100}
    )
    assert runs == ["x"]
    assert guard.inspect(out["replay_guard"]).stop_reason == "repeat_limit"


# --- 12: polling a status with `volatile=True` -----------------------------------------------


def _poll(answers: list[str], policy: ToolPolicy, polls: int) -> tuple[list[str], Any]:
    left = iter(answers)
    seen: list[str] = []

    @tool
    def job_status(job: str) -> str:
        """The job's status."""
        seen.append(answer := next(left))
        return answer

    guard = ReplayGuard(GuardConfig(tools={"job_status": policy}))
    model = ScriptedChatModel.looping("job_status", {"job": "j1"}, times=polls)
    agent = create_agent(model, [job_status], middleware=[guard.middleware()])
    with warnings.catch_warnings():
        warnings.simplefilter("error", ReplayGuardWarning)
        out = agent.invoke({"messages": [HumanMessage("wait for j1")]})
    return seen, out


def test_a_volatile_poll_runs_until_the_status_changes():
    seen, out = _poll(["running", "running", "running", "done"], ToolPolicy(volatile=True), 4)
    assert seen == ["running", "running", "running", "done"]
    assert out["messages"][-1].content == "Done."
    assert "replay_guard" not in out or not out["replay_guard"].get("stop")


def test_a_poll_whose_status_never_changes_is_stopped_at_its_own_bound():
    seen, out = _poll(["running"] * 20, ToolPolicy(volatile=True), 20)
    assert seen == ["running"] * 4  # the first answer and max_repeats (3) more
    assert "Stopped" in out["messages"][-2].content
    seen, _ = _poll(["running"] * 20, ToolPolicy(volatile=True, max_repeats=8), 20)
    assert len(seen) == 9


def test_a_changing_status_starts_the_count_over():
    answers = ["queued"] * 3 + ["running"] * 3 + ["done"]  # 7 polls: more than 4 in all
    seen, out = _poll(answers, ToolPolicy(volatile=True), len(answers))
    assert seen == answers
    assert out["messages"][-1].content == "Done."


def test_the_eval_counts_polls_as_the_guard_decides_them():
    config = GuardConfig(tools={"job_status": ToolPolicy(volatile=True)})

    def trajectory(answers: list[str]) -> dict[str, Any]:
        calls = [{"name": "job_status", "args": {"job": "j1"}, "result": a} for a in answers]
        return {"id": "poll", "calls": calls}

    report = evaluate_trajectories([trajectory(["running"] * 3 + ["done"])], config)
    assert report.total.blocked == 0
    report = evaluate_trajectories([trajectory(["running"] * 6)], config)
    total = report.total
    assert (total.blocked, total.stops.redundant, total.wrong) == (1, 1, 0)
    assert total.by_reason == {"repeat_limit": 1}
    assert total.repeat_kinds["volatile_read"] == [5, 2]  # the block and the cut call
