"""LangChain's `ShellToolMiddleware` (a persistent local bash session) with the `shell` preset."""

from __future__ import annotations

import asyncio
import os
import shutil
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ShellToolMiddleware
from langchain_core.messages import HumanMessage

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.stacks import last_ai, stop_of, tool_texts

os.environ["LANGSMITH_TRACING"] = "false"

# ShellToolMiddleware leaves its bash session's pipes to the garbage collector (LangChain's,
# not the guard's): under -W error their ResourceWarnings would fail these tests.
pytestmark = [
    pytest.mark.skipif(shutil.which("bash") is None, reason="ShellToolMiddleware runs bash"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

SHELL_POLICY = GuardConfig(toolkits=["langchain"])


def shell_agent(tmp_path, command: str):
    (tmp_path / "notes.txt").write_text("the printer is on fire\n")
    model = ScriptedChatModel.looping("shell", {"command": command}, times=20)
    guard = ReplayGuard(SHELL_POLICY)
    shell = ShellToolMiddleware(workspace_root=tmp_path)
    return create_agent(model, [], middleware=[shell, guard.middleware()]), model


def invoke(agent, mode):
    payload = {"messages": [HumanMessage("what do my notes say?")]}
    if mode == "sync":
        return agent.invoke(payload)
    return asyncio.run(agent.ainvoke(payload))


def assert_the_read_ran_once(out: Any, model: Any) -> None:
    """`cat notes.txt` asked again and again: run once, answered twice, then stopped."""
    answers = tool_texts(out["messages"], "shell")
    assert answers[0].strip() == "the printer is on fire"
    assert all(a.startswith("Not executed") for a in answers[1:3])
    assert len(answers) == 4
    assert model.calls == 4
    assert stop_of(last_ai(out["messages"])) == "repeat_limit"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_repeated_read_only_command_runs_once(tmp_path, mode):
    agent, model = shell_agent(tmp_path, "cat notes.txt")
    out = invoke(agent, mode)
    assert_the_read_ran_once(out, model)


# No checkpointer: the guard warns that the unsafe shell call is not durable.
@pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")
def test_a_repeated_write_runs_each_time_until_the_limit(tmp_path):
    # A write is never answered from an earlier result: the file shows every real run.
    agent, _ = shell_agent(tmp_path, "echo again >> log.txt")
    out = invoke(agent, "sync")
    assert (tmp_path / "log.txt").read_text().splitlines() == ["again"] * 3
    assert stop_of(last_ai(out["messages"])) == "repeat_limit"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_file_search_middleware_a_repeated_search_runs_once(tmp_path, mode):
    from langchain.agents.middleware import FilesystemFileSearchMiddleware

    (tmp_path / "printer.txt").write_text("the printer is on fire\n")
    guard = ReplayGuard(GuardConfig(toolkits=["langchain"]))
    model = ScriptedChatModel.looping("grep_search", {"pattern": "fire"}, times=20)
    search = FilesystemFileSearchMiddleware(root_path=str(tmp_path))
    agent = create_agent(model, [], middleware=[search, guard.middleware()])
    out = invoke(agent, mode)
    answers = tool_texts(out["messages"], "grep_search")
    assert answers[0] == "/printer.txt"
    assert all(a.startswith("Not executed") for a in answers[1:3])
    assert model.calls == 4
    assert stop_of(last_ai(out["messages"])) == "repeat_limit"


ORDERS = ["guard-first", "guard-last"]
MODES = ["sync", "async", "astream"]


def run_shell(workspace, script, order: str | None, mode: str):
    """Run a shell agent over a fresh `workspace` (notes.txt inside); the guard in `order`.

    Returns the final state and the model.
    """
    workspace.mkdir()
    (workspace / "notes.txt").write_text("the printer is on fire\n")
    model = ScriptedChatModel(script=script)
    shell = ShellToolMiddleware(workspace_root=workspace)
    middleware = [shell]
    if order == "guard-first":
        middleware.insert(0, ReplayGuard(SHELL_POLICY).middleware())
    elif order == "guard-last":
        middleware.append(ReplayGuard(SHELL_POLICY).middleware())
    agent = create_agent(model, [], middleware=middleware)
    payload = {"messages": [HumanMessage("what do my notes say?")]}
    if mode == "sync":
        return agent.invoke(payload), model
    if mode == "async":
        return asyncio.run(agent.ainvoke(payload)), model

    async def stream():
        last = None
        async for state in agent.astream(payload, stream_mode="values"):
            last = state
        return last

    return asyncio.run(stream()), model


def shape(messages):
    """What a user reads of a run: each message's type, text and tool calls."""
    return [
        (type(m).__name__, m.text, [(c["name"], c["args"]) for c in getattr(m, "tool_calls", [])])
        for m in messages
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_shell_a_repeated_read_only_command_runs_once_guard_first_and_last(tmp_path, order, mode):
    loop = [[("shell", {"command": "cat notes.txt"})] for _ in range(20)]
    out, model = run_shell(tmp_path / "ws", loop, order, mode)
    assert_the_read_ran_once(out, model)


def test_shell_without_the_guard_a_repeated_read_runs_every_time(tmp_path):
    loop = [[("shell", {"command": "cat notes.txt"})] for _ in range(20)]
    out, model = run_shell(tmp_path / "ws", loop, None, "sync")
    answers = tool_texts(out["messages"], "shell")
    assert [a.strip() for a in answers] == ["the printer is on fire"] * 20
    assert model.calls == 21


# No checkpointer: the guard warns that the unsafe shell write is not durable.
@pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_shell_a_healthy_run_is_the_unguarded_run(tmp_path, order, mode):
    # A read, a write, the same read again (it sees the write: not a duplicate), a listing.
    script = [
        [("shell", {"command": "cat notes.txt"})],
        [("shell", {"command": "echo call the fire brigade >> notes.txt"})],
        [("shell", {"command": "cat notes.txt"})],
        [("shell", {"command": "ls"})],
        "The printer is on fire; I noted to call the fire brigade.",
    ]
    plain, plain_model = run_shell(tmp_path / "plain", script, None, mode)
    guarded, model = run_shell(tmp_path / "guarded", script, order, mode)
    assert shape(guarded["messages"]) == shape(plain["messages"])
    assert tool_texts(guarded["messages"])[2].splitlines() == [
        "the printer is on fire",
        "call the fire brigade",
    ]
    assert (tmp_path / "guarded" / "notes.txt").read_text() == (
        tmp_path / "plain" / "notes.txt"
    ).read_text()
    assert model.calls == plain_model.calls == 5
    assert stop_of(last_ai(guarded["messages"])) is None
