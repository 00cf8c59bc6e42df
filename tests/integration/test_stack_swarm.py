"""Guarded `create_agent` agents in a `langgraph-swarm` (`create_swarm`): handoffs and a loop."""

from __future__ import annotations

import asyncio
import os
from collections import Counter

import pytest

pytest.importorskip("langgraph_swarm", reason="the stacks extra: pip install -e '.[stacks]'")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph_swarm import create_handoff_tool, create_swarm

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.stacks import counted_tools, stop_of, tool_texts

os.environ["LANGSMITH_TRACING"] = "false"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_agent_that_loops_after_a_handoff_is_stopped(mode):
    runs: Counter[str] = Counter()
    tools = counted_tools(runs)
    guard = ReplayGuard(store=InMemoryStore())
    sales_model = ScriptedChatModel(script=[[("transfer_to_support", {})]], final="unused")
    support_model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50)
    sales = create_agent(
        sales_model,
        [tools["quote"], create_handoff_tool(agent_name="support")],
        name="sales",
        middleware=[guard.middleware(name="sales")],
    )
    support = create_agent(
        support_model,
        [tools["lookup"], create_handoff_tool(agent_name="sales")],
        name="support",
        middleware=[guard.middleware(name="support")],
    )
    app = create_swarm([sales, support], default_active_agent="sales").compile(
        checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": f"swarm-{mode}"}}
    payload = {"messages": [HumanMessage("my line is down")]}
    if mode == "sync":
        out = app.invoke(payload, config)
    else:
        out = asyncio.run(app.ainvoke(payload, config))

    assert runs["lookup"] == 1
    assert (sales_model.calls, support_model.calls) == (1, 4)
    assert tool_texts(out["messages"], "transfer_to_support") == [
        "Successfully transferred to support"
    ]
    final = out["messages"][-1]
    assert isinstance(final, AIMessage)
    assert stop_of(final) == "repeat_limit"
    assert final.name == "support"
    assert out["active_agent"] == "support"  # the next user message goes back to it

    # A new user message is a new turn: the stopped agent may look the customer up again.
    more = {"messages": [HumanMessage("try again please")]}
    if mode == "sync":
        app.invoke(more, config)
    else:
        asyncio.run(app.ainvoke(more, config))
    assert runs["lookup"] == 2
    assert support_model.calls == 8
