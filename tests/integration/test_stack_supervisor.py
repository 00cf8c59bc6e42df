"""Two guarded workers under `langgraph-supervisor` (`create_supervisor`): one loops."""

from __future__ import annotations

import asyncio
import os
import warnings
from collections import Counter

import pytest

pytest.importorskip("langgraph_supervisor", reason="the stacks extra: pip install -e '.[stacks]'")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.warnings import LangGraphDeprecatedSinceV10
from langgraph_supervisor import create_supervisor

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.stacks import counted_tools, stop_of, tool_texts

os.environ["LANGSMITH_TRACING"] = "false"


def build(runs: Counter[str]):
    tools = counted_tools(runs)
    guard = ReplayGuard(store=InMemoryStore())  # one guard, one ledger store, for every agent
    researcher_model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50)
    pricer_model = ScriptedChatModel(script=[[("quote", {"item": "plan"})]], final="3 EUR.")
    researcher = create_agent(
        researcher_model,
        [tools["lookup"]],
        name="researcher",
        middleware=[guard.middleware(name="researcher")],  # its own channel
    )
    pricer = create_agent(
        pricer_model, [tools["quote"]], name="pricer", middleware=[guard.middleware(name="pricer")]
    )
    supervisor_model = ScriptedChatModel(
        script=[[("transfer_to_researcher", {})], [("transfer_to_pricer", {})]],
        final="Summary for the user.",
    )
    # create_supervisor builds its own agent with langgraph's deprecated create_react_agent.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
        app = create_supervisor([researcher, pricer], model=supervisor_model).compile(
            checkpointer=InMemorySaver()
        )
    return app, researcher_model, pricer_model, supervisor_model


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_looping_worker_is_stopped_and_the_other_is_not_affected(mode):
    runs: Counter[str] = Counter()
    app, researcher_model, pricer_model, supervisor_model = build(runs)
    config = {"configurable": {"thread_id": f"supervisor-{mode}"}}
    payload = {"messages": [HumanMessage("who is P1 and what does the plan cost?")]}
    if mode == "sync":
        out = app.invoke(payload, config)
    else:
        out = asyncio.run(app.ainvoke(payload, config))

    assert runs == {"lookup": 1, "quote": 1}
    assert researcher_model.calls == 4  # stopped on its 4th identical call
    assert pricer_model.calls == 2  # ran as usual afterwards
    assert supervisor_model.calls == 3
    # What the supervisor sees of the stopped worker: its final "stopped" message.
    stops = [m for m in out["messages"] if isinstance(m, AIMessage) and stop_of(m)]
    assert [stop_of(m) for m in stops] == ["repeat_limit"]
    assert stops[0].text.startswith("I stopped here because I called 'lookup' 4 times")
    assert tool_texts(out["messages"], "quote") == []  # last_message mode: workers' finals only
    assert out["messages"][-1].text == "Summary for the user."


def test_the_stopped_workers_message_carries_the_workers_name():
    # Supervisors and swarms tell workers apart by AIMessage.name (create_agent(name=...)
    # sets it on the model's messages); the guard's final message must carry it too.
    runs: Counter[str] = Counter()
    app, *_ = build(runs)
    out = app.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "name"}})
    [stop] = [m for m in out["messages"] if isinstance(m, AIMessage) and stop_of(m)]
    assert stop.name == "researcher"
