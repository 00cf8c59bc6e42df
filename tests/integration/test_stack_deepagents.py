"""The guard inside Deep Agents (`create_deep_agent`), as a user runs it: sync and async."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest

pytest.importorskip("deepagents", reason="the stacks extra: pip install -e '.[stacks]'")

from deepagents import create_deep_agent
from deepagents.backends.utils import create_file_data
from deepagents.middleware.subagents import GENERAL_PURPOSE_SUBAGENT
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command

from langgraph_replay_guard import GuardConfig, LoopAbortedError, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel, tool_call
from tests.integration.stacks import counted_tools, last_ai, stop_of, tool_texts

os.environ["LANGSMITH_TRACING"] = "false"

MODES = ["sync", "async"]


def run(agent, payload, config, mode):
    if mode == "sync":
        return agent.invoke(payload, config)
    return asyncio.run(agent.ainvoke(payload, config))


def deep_guard(**tools):
    return ReplayGuard(GuardConfig(toolkits=["deepagents"], tools=tools), store=InMemoryStore())


@pytest.mark.parametrize("mode", MODES)
def test_a_looping_read_file_runs_once_and_the_run_stops(mode):
    guard = deep_guard()
    model = ScriptedChatModel.looping("read_file", {"file_path": "/notes.txt"}, times=50)
    agent = create_deep_agent(
        model, [], middleware=[guard.middleware()], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": f"read-{mode}"}}
    files = {"/notes.txt": create_file_data("the printer is on fire\n")}
    out = run(agent, {"messages": [HumanMessage("read my notes")], "files": files}, config, mode)

    reads = tool_texts(out["messages"], "read_file")
    assert "the printer is on fire" in reads[0]  # the real read
    assert all(r.startswith("Not executed") for r in reads[1:3])  # answered, not re-read
    assert reads[3].startswith("Stopped")
    assert model.calls == 4
    assert stop_of(last_ai(out["messages"])) == "repeat_limit"
    assert last_ai(out["messages"]).text.startswith("I stopped here")
    assert guard.inspect(agent.get_state(config)).stop_reason == "repeat_limit"


@pytest.mark.parametrize("mode", MODES)
def test_a_looping_user_tool_beside_the_built_in_tools(mode):
    runs: Counter[str] = Counter()
    tools = counted_tools(runs)
    guard = deep_guard(send_email="unsafe")
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50)
    agent = create_deep_agent(
        model, list(tools.values()), middleware=[guard.middleware()], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": f"user-tool-{mode}"}}
    out = run(agent, {"messages": [HumanMessage("who is P1?")]}, config, mode)

    assert runs["lookup"] == 1
    assert model.calls == 4
    assert stop_of(last_ai(out["messages"])) == "repeat_limit"
    assert guard.inspect(agent.get_state(config)).stop_reason == "repeat_limit"


# InMemorySaver and durability="async" make the guard warn for unsafe tools (not durable).
@pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")
@pytest.mark.parametrize("mode", MODES)
def test_an_approved_unsafe_call_runs_exactly_once_after_resume(mode):
    runs: Counter[str] = Counter()
    tools = counted_tools(runs)
    store = InMemoryStore()
    guard = ReplayGuard(
        GuardConfig(toolkits=["deepagents"], tools={"send_email": "unsafe"}), store=store
    )
    email = {"to": "ops@example.com", "body": "printer on fire"}
    model = ScriptedChatModel(script=[[("send_email", email)]], final="Sent.")
    agent = create_deep_agent(
        model,
        [tools["send_email"]],
        middleware=[guard.middleware()],
        interrupt_on={"send_email": True},
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": f"hitl-{mode}"}}

    paused = run(agent, {"messages": [HumanMessage("tell ops")]}, config, mode)
    assert runs["send_email"] == 0
    [interrupt] = paused["__interrupt__"]
    assert interrupt.value["action_requests"][0]["name"] == "send_email"

    out = run(agent, Command(resume={"decisions": [{"type": "approve"}]}), config, mode)
    assert runs["send_email"] == 1
    assert tool_texts(out["messages"], "send_email") == ["sent to ops@example.com"]
    assert out["messages"][-1].text == "Sent."
    assert model.calls == 2  # the resume did not ask the model again
    # The ledger holds the call as completed: a re-run of this step would be answered from it.
    [row] = store.search(("replay_guard", "ledger", f"hitl-{mode}"))
    assert (row.value["tool"], row.value["status"]) == ("send_email", "completed")

    # Resuming again (a retried request) runs nothing more.
    run(agent, None, config, mode)
    assert runs["send_email"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_looping_sub_agent_is_stopped_and_the_parent_reads_why(mode):
    runs: Counter[str] = Counter()
    tools = counted_tools(runs)
    guard = deep_guard()  # one guard object, one ledger store, for every agent
    researcher_model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50)
    parent_model = ScriptedChatModel(
        script=[[("task", {"description": "Who is P1?", "subagent_type": "researcher"})]],
        final="P1 could not be looked up.",
    )
    researcher = {
        "name": "researcher",
        "description": "Looks customers up.",
        "system_prompt": "Look the customer up.",
        "tools": [tools["lookup"]],
        "model": researcher_model,
        # Each agent its own guard middleware, named: its own state channel.
        "middleware": [guard.middleware(name="researcher")],
    }
    agent = create_deep_agent(
        parent_model,
        [tools["lookup"]],
        subagents=[researcher],
        middleware=[guard.middleware(name="main")],
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": f"sub-{mode}"}}
    out = run(agent, {"messages": [HumanMessage("help")]}, config, mode)

    assert runs["lookup"] == 1
    assert researcher_model.calls == 4
    # What the parent sees: the sub-agent's final "stopped" message as the task result.
    [task_result] = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert task_result.name == "task"
    assert task_result.text.startswith("I stopped here because I called 'lookup' 4 times")
    assert task_result.status == "success"  # a result like any other: the parent goes on
    assert out["messages"][-1].text == "P1 could not be looked up."
    # The parent's guard saw one successful `task` call and did not stop.
    view = guard.inspect(agent.get_state(config).values["replay_guard__main"])
    assert view.stop_reason is None
    assert [c.tool for c in view.recent_calls] == ["task"]


def _general_purpose_step(messages: list[BaseMessage]):
    """One model for parent and general-purpose sub-agent: the sub-agent's input is the task."""
    first = next(m for m in messages if isinstance(m, HumanMessage))
    if first.text == "Who is P1?":
        return [tool_call("lookup", {"id": "P1"})]  # the sub-agent loops
    if not any(isinstance(m, ToolMessage) for m in messages):
        return [
            tool_call("task", {"description": "Who is P1?", "subagent_type": "general-purpose"})
        ]
    return "Done."


@pytest.mark.parametrize("guarded", [False, True])
def test_the_general_purpose_sub_agent_is_guarded_only_when_its_spec_is_given(guarded):
    runs: Counter[str] = Counter()
    tools = counted_tools(runs)
    guard = deep_guard()
    model = ScriptedChatModel(script=[_general_purpose_step] * 12)
    subagents = []
    if guarded:
        # The parent's middleware is not inherited by the default sub-agent: give its spec.
        subagents = [{**GENERAL_PURPOSE_SUBAGENT, "middleware": [guard.middleware(name="gp")]}]
    agent = create_deep_agent(
        model,
        [tools["lookup"]],
        subagents=subagents,
        middleware=[guard.middleware(name="main")],
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke(
        {"messages": [HumanMessage("help")]}, {"configurable": {"thread_id": f"gp-{guarded}"}}
    )
    [task_result] = tool_texts(out["messages"], "task")
    if guarded:
        assert runs["lookup"] == 1
        assert task_result.startswith("I stopped here")
    else:
        assert runs["lookup"] == 11  # every step after the `task` call: until the script ran out
        assert task_result == "Done."


def test_a_sub_agent_guard_with_exit_behavior_error_ends_the_parents_run_too():
    runs: Counter[str] = Counter()
    tools = counted_tools(runs)
    strict = ReplayGuard(exit_behavior="error")
    researcher = {
        "name": "researcher",
        "description": "Looks customers up.",
        "system_prompt": "Look the customer up.",
        "tools": [tools["lookup"]],
        "model": ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50),
        "middleware": [strict.middleware(name="researcher")],
    }
    parent_model = ScriptedChatModel(
        script=[[("task", {"description": "Who is P1?", "subagent_type": "researcher"})]]
    )
    agent = create_deep_agent(
        parent_model,
        [tools["lookup"]],
        subagents=[researcher],
        middleware=[deep_guard().middleware(name="main")],
        checkpointer=InMemorySaver(),
    )
    with pytest.raises(LoopAbortedError) as raised:
        agent.invoke({"messages": [HumanMessage("help")]}, {"configurable": {"thread_id": "err"}})
    assert (raised.value.tool, raised.value.reason) == ("lookup", "repeat_limit")
    assert runs["lookup"] == 1
    assert parent_model.calls == 1  # the parent never got a task result
