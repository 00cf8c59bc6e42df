"""Two guarded workers under `langgraph-supervisor` (`create_supervisor`): one loops."""

from __future__ import annotations

import asyncio
import os
import warnings
from collections import Counter

import pytest

pytest.importorskip("langgraph_supervisor", reason="the stacks extra: pip install -e '.[stacks]'")

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command
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


ORDERS = ["guard-first", "guard-last"]
MODES = ["sync", "async", "astream"]
EMAIL = {"to": "boss", "body": "the plan costs 3 EUR"}


def build_composed(runs: Counter[str], order: str | None):
    """Two workers, each with the guard and another middleware, in `order` (None: no guard).

    The researcher loops on one read under `ToolCallLimitMiddleware(exit_behavior="continue")`
    (over its limit, the middleware answers the calls itself); the pricer quotes, then sends
    an email (unsafe) that `HumanInTheLoopMiddleware` submits for review. The supervisor
    keeps the workers' full history.
    """
    from langchain.agents.middleware import HumanInTheLoopMiddleware, ToolCallLimitMiddleware

    tools = counted_tools(runs)
    store = InMemoryStore()
    guard = ReplayGuard(store=store, tools={"send_email": "unsafe"})

    def stack(name: str, other):
        if order is None:
            return [other]
        mine = guard.middleware(name=name)
        return [mine, other] if order == "guard-first" else [other, mine]

    researcher_model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=50)
    limit = ToolCallLimitMiddleware(run_limit=2, exit_behavior="continue")
    researcher = create_agent(
        researcher_model,
        [tools["lookup"]],
        name="researcher",
        middleware=stack("researcher", limit),
    )
    pricer_model = ScriptedChatModel(
        script=[[("quote", {"item": "plan"})], [("send_email", EMAIL)]],
        final="The plan costs 3 EUR; the boss is told.",
    )
    review = HumanInTheLoopMiddleware(interrupt_on={"send_email": True})
    pricer = create_agent(
        pricer_model,
        [tools["quote"], tools["send_email"]],
        name="pricer",
        middleware=stack("pricer", review),
    )
    supervisor_model = ScriptedChatModel(
        script=[[("transfer_to_researcher", {})], [("transfer_to_pricer", {})]],
        final="Summary for the user.",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LangGraphDeprecatedSinceV10)
        app = create_supervisor(
            [researcher, pricer], model=supervisor_model, output_mode="full_history"
        ).compile(checkpointer=InMemorySaver(), store=store)
    return app, researcher_model, pricer_model, store


def run_approving(app, thread: str, mode: str):
    """Run the supervisor to its end, approving every review; count the reviews."""
    config = {"configurable": {"thread_id": thread}}

    def run(payload):
        if mode == "sync":
            return app.invoke(payload, config)
        if mode == "async":
            return asyncio.run(app.ainvoke(payload, config))

        async def stream():
            last = None
            async for state in app.astream(payload, config, stream_mode="values"):
                last = state
            return last

        return asyncio.run(stream())

    out = run({"messages": [HumanMessage("who is P1, what does the plan cost? tell the boss")]})
    reviews = 0
    while app.get_state(config).interrupts and reviews < 5:
        reviews += 1
        out = run(Command(resume={"decisions": [{"type": "approve"}]}))
    return out, reviews


def pricer_part(messages) -> list[tuple]:
    """What the pricer did: its messages and its tools' answers, as a user reads them."""
    return [
        (type(m).__name__, m.text, [(c["name"], c["args"]) for c in m.tool_calls])
        if isinstance(m, AIMessage)
        else (type(m).__name__, m.text, m.status)
        for m in messages
        if (isinstance(m, AIMessage) and m.name == "pricer")
        or (isinstance(m, ToolMessage) and m.name in ("quote", "send_email"))
    ]


# The guard warns that the unsafe email runs without a durable checkpointer (InMemorySaver).
@pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_workers_with_the_guard_and_another_middleware(order, mode):
    from langgraph_replay_guard.replay.ledger import row_namespace

    plain_runs: Counter[str] = Counter()
    plain_app, *_ = build_composed(plain_runs, None)
    plain, _ = run_approving(plain_app, "plain", mode)

    runs: Counter[str] = Counter()
    app, researcher_model, pricer_model, store = build_composed(runs, order)
    thread = f"composed-{order}-{mode}"
    out, reviews = run_approving(app, thread, mode)

    # The looping researcher is stopped (the calls its limit answered counted too).
    assert runs["lookup"] == 1
    assert researcher_model.calls == 4
    [stop] = [m for m in out["messages"] if isinstance(m, AIMessage) and stop_of(m)]
    assert (stop_of(stop), stop.name) == ("repeat_limit", "researcher")
    # The pricer's run is the unguarded one; its email, reviewed once, went out once.
    assert pricer_part(out["messages"]) == pricer_part(plain["messages"])
    # The quote and its answer, the email and its answer, the pricer's reply, its handoff.
    assert len(pricer_part(plain["messages"])) == 6
    assert pricer_model.calls == 3
    assert reviews == 1
    assert (runs["quote"], runs["send_email"]) == (1, 1)
    assert tool_texts(out["messages"], "send_email") == ["sent to boss"]
    rows = [item.value for item in store.search(row_namespace(("replay_guard",), thread))]
    [sent] = [row for row in rows if row["tool"] == "send_email"]
    assert (sent["status"], sent["replay"], sent["args"]) == ("completed", "unsafe", EMAIL)
    assert sent["attempts"] == 1
    assert out["messages"][-1].text == "Summary for the user."


def test_without_the_guard_the_researcher_loops_to_the_end_of_its_script():
    runs: Counter[str] = Counter()
    app, researcher_model, pricer_model, _ = build_composed(runs, None)
    out, reviews = run_approving(app, "unguarded", "sync")
    assert researcher_model.calls == 51
    assert runs == {"lookup": 2, "quote": 1, "send_email": 1}  # the limit answered the rest
    assert not [m for m in out["messages"] if isinstance(m, AIMessage) and stop_of(m)]
    assert (pricer_model.calls, reviews) == (3, 1)
