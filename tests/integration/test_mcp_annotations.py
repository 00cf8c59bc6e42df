"""MCP tool annotations give the class of tools the policy does not name: a real stdio server."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import (
    LoopAbortedError,
    ReplayGuard,
    ReplayGuardCallbackHandler,
    ReplayGuardMiddleware,
    ToolPolicy,
)
from langgraph_replay_guard.integrations.ledger_gate import IDEMPOTENCY_KEY_CONFIG
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph
from tests import warm_children
from tests.integration.stacks import last_ai, stop_of, tool_texts

os.environ["LANGSMITH_TRACING"] = "false"

pytestmark = [
    # InMemorySaver makes the guard warn that an unsafe tool's thread is not durable.
    pytest.mark.filterwarnings(
        "ignore:langgraph-replay-guard.*:langgraph_replay_guard.ReplayGuardWarning"
    ),
    # mcp is imported by `mcp_tools`, not at collection: every xdist worker collects this
    # module, and only the one that runs its tests (one group, with test_stack_mcp.py:
    # tests/conftest.py) imports mcp (about 0.4 s of CPU).
    pytest.mark.skipif(
        importlib.util.find_spec("mcp") is None
        or importlib.util.find_spec("langchain_mcp_adapters") is None,
        reason="the stacks extra: pip install -e '.[stacks]'",
    ),
]

SERVER = Path(__file__).with_name("mcp_annotated_server.py")


def mcp_tools(runs_file: Path) -> list[Any]:
    # A real stdio server per session (the adapter's default: one per tool call), forked
    # from the warm zygote (tests/warm_children.py): these tests are about the annotations,
    # not the server's imports.
    from langchain_mcp_adapters.client import MultiServerMCPClient

    command, args, warm = warm_children.stdio_command(SERVER)
    client = MultiServerMCPClient(
        {
            "helpdesk": {
                "command": command,
                "args": args,
                "transport": "stdio",
                "env": {**os.environ, "MCP_RUNS_FILE": str(runs_file), **warm},
            }
        }
    )
    return asyncio.run(client.get_tools())


def server_runs(runs_file: Path) -> list[str]:
    return runs_file.read_text().splitlines() if runs_file.exists() else []


def ledger_rows(store: InMemoryStore, thread: str) -> list[dict[str, Any]]:
    return [item.value for item in store.search(("replay_guard", "ledger", thread), limit=100)]


class LedgerProbe:
    """What the ledger holds, and the idempotency key, as each call reaches the server.

    It wraps the MCP tools themselves (`probed`): the last step before the request goes to
    the server, past every middleware, where the guard claims the call.
    """

    def __init__(self, store: InMemoryStore, thread: str) -> None:
        self.store, self.thread = store, thread
        self.seen: list[tuple[str, list[tuple[str, str, str]], str | None]] = []

    def probed(self, tools: list[Any]) -> list[Any]:
        return [self._probed(tool) for tool in tools]

    def _probed(self, tool: Any) -> Any:
        real = tool.ainvoke

        async def ainvoke(input: Any, config: Any = None, **kwargs: Any) -> Any:
            rows = [
                (row["tool_call_id"], row["status"], row["replay"])
                for row in ledger_rows(self.store, self.thread)
            ]
            runtime = input["args"].get("runtime")
            configurable = (getattr(runtime, "config", None) or {}).get("configurable", {})
            self.seen.append((input["id"], rows, configurable.get(IDEMPOTENCY_KEY_CONFIG)))
            return await real(input, config, **kwargs)

        copy = tool.model_copy()
        object.__setattr__(copy, "ainvoke", ainvoke)
        return copy


class GuardTraces(BaseCallbackHandler):
    """The guard's decision in the metadata of each tool run, as a tracer records it."""

    run_inline = True

    def __init__(self) -> None:
        self.runs: list[tuple[str, dict[str, Any] | None]] = []

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> None:
        self.runs.append((serialized["name"], (kwargs.get("metadata") or {}).get("replay_guard")))


def run_agent(tools: list[Any], model: ScriptedChatModel, *middleware: Any, **kwargs: Any) -> Any:
    thread = kwargs.pop("thread", f"mcp-{uuid.uuid4().hex[:8]}")
    callbacks = kwargs.pop("callbacks", [])
    agent = create_agent(
        model, tools, middleware=list(middleware), checkpointer=InMemorySaver(), **kwargs
    )
    config = {"configurable": {"thread_id": thread}, "callbacks": callbacks}
    return asyncio.run(agent.ainvoke({"messages": [HumanMessage("help")]}, config))


def looping(tool: str, **args: str) -> ScriptedChatModel:
    return ScriptedChatModel.looping(tool, args, times=20)


def test_a_read_only_tool_is_deduplicated_even_under_a_cautious_default(tmp_path):
    runs_file = tmp_path / "runs.txt"
    traces = GuardTraces()
    guard = ReplayGuardMiddleware(default_policy=ToolPolicy(replay="unsafe"))
    out = run_agent(
        mcp_tools(runs_file), looping("lookup_ticket", ticket_id="T-7"), guard, callbacks=[traces]
    )
    assert server_runs(runs_file) == ["lookup_ticket T-7"]  # readOnlyHint: pure, deduplicated
    assert tool_texts(out["messages"])[1].startswith("Not executed")
    assert stop_of(last_ai(out["messages"])) == "repeat_limit"
    first = traces.runs[0]
    assert first[0] == "lookup_ticket"
    assert first[1] is not None
    assert (first[1]["replay"], first[1]["source"]) == ("pure", "annotations")


def test_a_read_only_tool_is_deduplicated_with_the_defaults(tmp_path):
    runs_file = tmp_path / "runs.txt"
    run_agent(
        mcp_tools(runs_file), looping("lookup_ticket", ticket_id="T-7"), ReplayGuardMiddleware()
    )
    assert server_runs(runs_file) == ["lookup_ticket T-7"]


def test_a_destructive_tool_without_a_policy_is_ledgered_as_unsafe(tmp_path):
    runs_file = tmp_path / "runs.txt"
    store, thread = InMemoryStore(), "destroy"
    probe = LedgerProbe(store, thread)
    out = run_agent(
        probe.probed(mcp_tools(runs_file)),
        looping("delete_ticket", ticket_id="T-7"),
        ReplayGuardMiddleware(),
        store=store,
        thread=thread,
    )
    # Never deduplicated: each repeat runs, until the repeat limit stops the loop.
    assert server_runs(runs_file) == ["delete_ticket T-7"] * 3
    assert stop_of(last_ai(out["messages"])) == "repeat_limit"
    # Before each call reached the server, its `started` row was in the ledger.
    for call_id, rows, key in probe.seen:
        assert (call_id, "started", "unsafe") in rows
        assert key is None
    assert {(r["tool"], r["replay"], r["status"]) for r in ledger_rows(store, thread)} == {
        ("delete_ticket", "unsafe", "completed")
    }


def test_an_annotated_tool_without_hints_gets_the_mcp_defaults_unsafe(tmp_path):
    runs_file = tmp_path / "runs.txt"
    run_agent(
        mcp_tools(runs_file), looping("escalate_ticket", ticket_id="T-7"), ReplayGuardMiddleware()
    )
    assert server_runs(runs_file) == ["escalate_ticket T-7"] * 3


def test_a_tool_without_annotations_keeps_the_default_policy(tmp_path):
    runs_file = tmp_path / "runs.txt"
    run_agent(mcp_tools(runs_file), looping("ticket_count"), ReplayGuardMiddleware())
    assert server_runs(runs_file) == ["ticket_count"]  # default_policy: pure


def test_an_idempotent_tool_gets_an_idempotency_key(tmp_path):
    runs_file = tmp_path / "runs.txt"
    store, thread = InMemoryStore(), "tag"
    probe = LedgerProbe(store, thread)
    model = ScriptedChatModel(script=[[("tag_ticket", {"ticket_id": "T-7", "tag": "urgent"})]])
    run_agent(
        probe.probed(mcp_tools(runs_file)),
        model,
        ReplayGuardMiddleware(),
        store=store,
        thread=thread,
    )
    assert server_runs(runs_file) == ["tag_ticket T-7 urgent"]
    [(call_id, rows, key)] = probe.seen
    assert (call_id, "started", "idempotent") in rows
    [row] = ledger_rows(store, thread)
    assert (row["replay"], row["status"]) == ("idempotent", "completed")
    assert isinstance(key, str)
    assert row["idempotency_key"] == key


def test_the_users_policy_overrides_the_hints(tmp_path):
    runs_file = tmp_path / "runs.txt"
    traces = GuardTraces()
    guard = ReplayGuardMiddleware(tools={"lookup_ticket": "unsafe", "delete_ticket": "pure"})
    model = ScriptedChatModel(
        script=[[("lookup_ticket", {"ticket_id": "T-7"})]] * 2
        + [[("delete_ticket", {"ticket_id": "T-7"})]] * 2
    )
    run_agent(mcp_tools(runs_file), model, guard, callbacks=[traces])
    assert server_runs(runs_file) == ["lookup_ticket T-7"] * 2 + ["delete_ticket T-7"]
    assert {(name, t["replay"], t["source"]) for name, t in traces.runs if t} == {
        ("lookup_ticket", "unsafe", "tools"),
        ("delete_ticket", "pure", "tools"),
    }


def test_a_wrapped_tool_node_uses_the_hints(tmp_path):
    runs_file = tmp_path / "runs.txt"
    store, thread = InMemoryStore(), "wrap"
    guard = ReplayGuard(store=store)
    tools = mcp_tools(runs_file)
    node = guard.wrap(ToolNode(tools))
    model = ScriptedChatModel(
        script=[[("lookup_ticket", {"ticket_id": "T-7"})]] * 2
        + [[("delete_ticket", {"ticket_id": "T-7"})]] * 2
    )
    graph = agent_graph(model, tools, guard=guard, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": thread}}
    asyncio.run(graph.ainvoke({"messages": [HumanMessage("help")]}, config))
    assert server_runs(runs_file) == ["lookup_ticket T-7"] + ["delete_ticket T-7"] * 2
    rows = ledger_rows(store, thread)
    assert sorted((r["tool"], r["replay"]) for r in rows) == [
        ("delete_ticket", "unsafe"),
        ("delete_ticket", "unsafe"),
        ("lookup_ticket", "pure"),
    ]
    assert node.tools_by_name.keys() == {t.name for t in tools}


@pytest.mark.parametrize("check", [True, False], ids=["check", "first-run"])
def test_the_callback_handler_learns_the_hints(tmp_path, check):
    runs_file = tmp_path / "runs.txt"
    handler = ReplayGuardCallbackHandler()
    agent = create_agent(looping("delete_ticket", ticket_id="T-7"), mcp_tools(runs_file))
    if check:
        handler.check(agent)  # learns them before the first model call
    # Without `check`, the tool's first run teaches the handler: the next batches are unsafe.
    config = {"configurable": {"thread_id": "cb"}, "callbacks": [handler]}
    with pytest.raises(LoopAbortedError):  # a callback ends a loop that goes on this way
        asyncio.run(agent.ainvoke({"messages": [HumanMessage("help")]}, config))
    assert server_runs(runs_file) == ["delete_ticket T-7"] * 3  # never deduplicated
