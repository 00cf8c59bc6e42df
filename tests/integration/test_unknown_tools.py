"""Calls to a tool that does not exist (a hallucinated name) are counted and stopped."""

from __future__ import annotations

import asyncio
import os

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import (
    GuardConfig,
    LoopAbortedError,
    ReplayGuard,
    ReplayGuardMiddleware,
    ReplayGuardState,
    ToolPolicy,
)
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph

# The tests that build a langchain_classic AgentExecutor run on one xdist worker: every worker
# collects this module, and only the one that runs them imports langchain_classic (0.3 s).
CLASSIC = pytest.mark.xdist_group("langchain-classic")

os.environ["LANGSMITH_TRACING"] = "false"

TYPE_ARGS = {"selector": "#q", "text": "weather"}
# Unknown names take the default policy: an unsafe default would make a run write ledger rows.
UNSAFE_DEFAULT = GuardConfig(default_policy=ToolPolicy(replay="unsafe"))


def browser_tools(runs: list[str]):
    @tool
    def browser_type(selector: str, text: str) -> str:
        """Type text into an element of the page."""
        runs.append(f"type {selector} {text}")
        return "typed"

    @tool
    def browser_click(selector: str) -> str:
        """Click an element of the page."""
        runs.append(f"click {selector}")
        return "clicked"

    return [browser_type, browser_click]


def hallucinating_model(times: int = 30) -> ScriptedChatModel:
    return ScriptedChatModel.looping("browser-type", TYPE_ARGS, times=times)


def user(text: str = "search the weather") -> dict:
    return {"messages": [HumanMessage(text)]}


def thread(name: str = "t1") -> dict:
    return {"configurable": {"thread_id": name}}


def tool_texts(messages) -> list[str]:
    return [m.text for m in messages if isinstance(m, ToolMessage)]


def assert_stopped_early(model, out, view, runs):
    assert model.calls == 4  # was 31: every one of the 30 calls went back to the model
    assert runs == []
    assert view.stop_reason == "unknown_tool"
    assert view.stop["tool"] == "browser-type"
    texts = tool_texts(out["messages"])
    # The first call gets the tools node's own answer; later ones say it is a loop.
    assert texts[0].startswith("Error: browser-type is not a valid tool, try one of [")
    assert "browser_type" in texts[0]
    assert "call 2 to a tool that does not exist" in texts[1]
    reminders = [p for p in model.system_prompts if p and "LOOP WARNING" in p]
    assert reminders, "the next model call is reminded"
    assert "browser_type" in reminders[0]
    assert "browser-type" in reminders[0]
    assert "typed" not in reminders[0]
    final = out["messages"][-1]
    assert isinstance(final, AIMessage)
    assert final.response_metadata.get("replay_guard_stop") == "unknown_tool"


# -- create_agent + ReplayGuardMiddleware ----------------------------------------------------


def test_middleware_stops_a_hallucinated_tool_name():
    runs: list[str] = []
    model = hallucinating_model()
    middleware = ReplayGuardMiddleware(UNSAFE_DEFAULT, store=InMemoryStore())
    agent = create_agent(
        model, browser_tools(runs), middleware=[middleware], checkpointer=InMemorySaver()
    )
    custom = []
    out = None
    for mode, chunk in agent.stream(user(), thread(), stream_mode=["custom", "values"]):
        if mode == "custom":
            custom.append(chunk)
        else:
            out = chunk
    view = middleware.guard.inspect(agent.get_state(thread()))
    assert_stopped_early(model, out, view, runs)
    reasons = [c["replay_guard"]["reason"] for c in custom if "replay_guard" in c]
    assert reasons
    assert set(reasons) == {"unknown_tool"}
    assert view.counters[-1].tool == "browser-type"
    assert ("browser-type", "unknown_tool", 4) in view.blocked
    # Nothing ran, so the replay ledger holds no row.
    assert middleware.guard.store.search(("replay_guard",), limit=100) == []


def test_middleware_stops_a_hallucinated_tool_name_async():
    runs: list[str] = []
    model = hallucinating_model()
    middleware = ReplayGuardMiddleware()
    agent = create_agent(
        model, browser_tools(runs), middleware=[middleware], checkpointer=InMemorySaver()
    )
    out = asyncio.run(agent.ainvoke(user(), thread()))
    view = middleware.guard.inspect(agent.get_state(thread()))
    assert_stopped_early(model, out, view, runs)


def test_varied_hallucinated_names_count_as_one_loop():
    runs: list[str] = []
    names = ["browser-type", "browser_typ", "mcp__browser_type", "browserType", "type"] * 6
    model = ScriptedChatModel(script=[[(name, TYPE_ARGS)] for name in names])
    middleware = ReplayGuardMiddleware()
    agent = create_agent(
        model, browser_tools(runs), middleware=[middleware], checkpointer=InMemorySaver()
    )
    agent.invoke(user(), thread())
    view = middleware.guard.inspect(agent.get_state(thread()))
    assert model.calls == 4  # the 4th call to a name that does not exist stops the run
    assert view.stop_reason == "unknown_tool"
    assert runs == []


def test_one_wrong_name_then_the_right_tool_runs_untouched():
    runs: list[str] = []
    model = ScriptedChatModel(
        script=[
            [("browser-type", TYPE_ARGS)],
            [("browser_type", TYPE_ARGS)],
            [("browser_click", {"selector": "#go"})],
            "It is sunny.",
        ]
    )
    middleware = ReplayGuardMiddleware()
    agent = create_agent(
        model, browser_tools(runs), middleware=[middleware], checkpointer=InMemorySaver()
    )
    out = agent.invoke(user(), thread())
    view = middleware.guard.inspect(agent.get_state(thread()))
    assert runs == ["type #q weather", "click #go"]
    assert out["messages"][-1].text == "It is sunny."
    assert view.stop is None
    assert not any(p and "LOOP WARNING" in p for p in model.system_prompts)
    assert tool_texts(out["messages"])[0] == (
        "Error: browser-type is not a valid tool, try one of [browser_type, browser_click]."
    )


@pytest.mark.parametrize("guarded", [False, True])
def test_a_first_wrong_name_is_answered_exactly_as_without_the_guard(guarded):
    # The message itself, metadata included, equals the unguarded agent's (langgraph-prebuilt's
    # own `test_tool_node_tool_call_input` compares them with ==): no guard mark on it.
    script = [[("browser-type", TYPE_ARGS)], "Done."]
    outs = []
    for with_guard in (False, guarded):
        middleware = [ReplayGuardMiddleware()] if with_guard else []
        agent = create_agent(
            ScriptedChatModel(script=script),
            browser_tools([]),
            middleware=middleware,
            checkpointer=InMemorySaver(),
        )
        outs.append(agent.invoke(user(), thread()))
    plain, checked = ([m for m in out["messages"] if isinstance(m, ToolMessage)] for out in outs)
    assert [m.model_dump(exclude={"id", "tool_call_id"}) for m in checked] == [
        m.model_dump(exclude={"id", "tool_call_id"}) for m in plain
    ]
    assert checked[0].response_metadata == {}


# -- guard.wrap(ToolNode) in a hand-written graph --------------------------------------------


def static_edge_graph(guard: ReplayGuard, model, tools):
    """The usual graph with the static `tools -> agent` edge (no route_after_tools)."""

    def agent(state: ReplayGuardState) -> dict:
        return {"messages": [model.invoke([guard.system_prompt(state), *state["messages"]])]}

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", agent)
    builder.add_node("tools", guard.tool_node(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=InMemorySaver())


def test_tool_node_with_route_after_tools_stops_a_hallucinated_name():
    runs: list[str] = []
    model = hallucinating_model()
    guard = ReplayGuard(UNSAFE_DEFAULT, store=InMemoryStore())
    graph = agent_graph(model, browser_tools(runs), guard=guard, checkpointer=InMemorySaver())
    out = graph.invoke(user(), thread())
    assert_stopped_early(model, out, guard.inspect(graph.get_state(thread())), runs)
    assert guard.store.search(("replay_guard",), limit=100) == []


def test_tool_node_with_route_after_tools_async():
    runs: list[str] = []
    model = hallucinating_model()
    guard = ReplayGuard()
    graph = agent_graph(model, browser_tools(runs), guard=guard, checkpointer=InMemorySaver())
    out = asyncio.run(graph.ainvoke(user(), thread()))
    assert_stopped_early(model, out, guard.inspect(graph.get_state(thread())), runs)


def test_tool_node_with_a_static_edge_is_bounded():
    runs: list[str] = []
    model = hallucinating_model()
    guard = ReplayGuard()
    graph = static_edge_graph(guard, model, browser_tools(runs))
    with pytest.raises(LoopAbortedError) as caught:
        graph.invoke(user(), thread())
    assert caught.value.reason == "stop_ignored"
    # The 4th call stops the run; the static edge goes back to the model once more, and
    # that come-back raises.
    assert model.calls == 5
    assert runs == []
    view = guard.inspect(graph.get_state(thread()))
    assert view.stop_reason == "unknown_tool"
    reminders = [p for p in model.system_prompts if p and "LOOP WARNING" in p]
    assert reminders
    assert "browser_type" in reminders[0]


# -- ReplayGuardCallbackHandler on an AgentExecutor --------------------------------------------


def executor_run(model, handler, runs, *, check: bool):
    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent
    from langchain_core.prompts import ChatPromptTemplate

    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "You use a browser.{reminder}"),
            ("human", "{input}"),
            ("placeholder", "{agent_scratchpad}"),
        ]
    ).partial(reminder=lambda: "\n\n" + (handler.reminder("e1") or ""))
    tools = browser_tools(runs)
    executor = AgentExecutor(
        agent=create_tool_calling_agent(model, tools, prompt),
        tools=tools,
        handle_parsing_errors=True,
        max_iterations=100,
    )
    callbacks = [handler.check(executor) if check else handler]
    return executor.invoke(
        {"input": "weather"}, {"callbacks": callbacks, "metadata": {"thread_id": "e1"}}
    )


@CLASSIC
@pytest.mark.parametrize("check", [True, False], ids=["checked", "learned"])
def test_callback_handler_on_agent_executor_stops_a_hallucinated_name(check):
    """Without `check(agent)` the handler learns the names from the executor's InvalidTool."""
    from langgraph_replay_guard import ReplayGuardCallbackHandler

    runs: list[str] = []
    model = hallucinating_model()
    handler = ReplayGuardCallbackHandler()
    with pytest.raises(LoopAbortedError) as caught:
        executor_run(model, handler, runs, check=check)
    assert caught.value.reason == "stop_ignored"
    # The 4th call stops the run; the executor asks the model once more, and that
    # come-back raises. Was 30 (then the executor's own answer).
    assert model.calls == 5
    assert runs == []
    view = handler.inspect("e1")
    assert view.stop_reason == "unknown_tool"
    assert ("browser-type", "unknown_tool", 4) in view.blocked
    reminders = [p for p in model.system_prompts if p and "LOOP WARNING" in p]
    assert reminders
    assert "browser_type" in reminders[0]


@CLASSIC
def test_callback_handler_lets_an_executor_correct_a_wrong_name():
    from langgraph_replay_guard import ReplayGuardCallbackHandler

    runs: list[str] = []
    model = ScriptedChatModel(
        script=[[("browser-type", TYPE_ARGS)], [("browser_type", TYPE_ARGS)], "It is sunny."]
    )
    handler = ReplayGuardCallbackHandler()
    out = executor_run(model, handler, runs, check=True)
    assert out["output"] == "It is sunny."
    assert runs == ["type #q weather"]
    assert handler.inspect("e1").stop is None


def test_callback_handler_on_create_agent_counts_what_the_tools_node_answers():
    """The ToolNode answers an unknown name without a tool run: the batch records it."""
    from langgraph_replay_guard import ReplayGuardCallbackHandler

    runs: list[str] = []
    model = hallucinating_model()
    handler = ReplayGuardCallbackHandler()
    agent = create_agent(model, browser_tools(runs), checkpointer=InMemorySaver())
    with pytest.raises(LoopAbortedError) as caught:
        agent.invoke(user(), {**thread(), "callbacks": [handler.check(agent)]})
    assert caught.value.reason == "stop_ignored"
    assert model.calls == 5  # the stop at the 4th call, then the come-back that raises
    assert runs == []
    assert handler.inspect("t1").stop_reason == "unknown_tool"


def test_traced_runs_carry_the_unknown_tool_decision():
    """Each call the guard answers shows as a tool run with its decision, for tracers."""
    from tests.integration.test_tracing import ToolRunCollector

    collector = ToolRunCollector()
    runs: list[str] = []
    guard = ReplayGuard()
    graph = agent_graph(hallucinating_model(), browser_tools(runs), guard=guard)
    graph.invoke(user(), {"callbacks": [collector]})
    assert collector.decisions() == [
        ("deny", "unknown_tool", 1),
        ("deny", "unknown_tool", 2),
        ("deny", "unknown_tool", 3),
        ("abort", "unknown_tool", 4),
    ]
    assert [run["name"] for run in collector.runs.values()] == ["browser-type"] * 4


def test_a_tool_an_inner_middleware_serves_is_not_an_unknown_tool():
    """LangGraph defers its name check so that a wrapper may serve a name the node lacks."""
    from langchain.agents.middleware import AgentMiddleware

    served: list[str] = []

    class DynamicScroll(AgentMiddleware):
        def wrap_tool_call(self, request, handler):
            if request.tool_call["name"] == "browser_scroll":
                served.append(request.tool_call["args"]["to"])
                return ToolMessage("scrolled", tool_call_id=request.tool_call["id"])
            return handler(request)

    runs: list[str] = []
    model = ScriptedChatModel(
        script=[[("browser_scroll", {"to": f"#s{i}"})] for i in range(6)] + ["Read it all."]
    )
    middleware = ReplayGuardMiddleware()
    agent = create_agent(
        model,
        browser_tools(runs),
        middleware=[middleware, DynamicScroll()],
        checkpointer=InMemorySaver(),
    )
    out = agent.invoke(user(), thread())
    assert served == [f"#s{i}" for i in range(6)]
    assert out["messages"][-1].text == "Read it all."
    view = middleware.guard.inspect(agent.get_state(thread()))
    assert view.stop is None
    assert view.blocked == ()


def test_a_tool_node_wrapper_that_serves_a_name_keeps_serving_it():
    served: list[str] = []

    def dynamic(request, execute):
        if request.tool_call["name"] == "browser_scroll":
            served.append(request.tool_call["args"]["to"])
            return ToolMessage("scrolled", tool_call_id=request.tool_call["id"])
        return execute(request)

    from langgraph.prebuilt import ToolNode

    runs: list[str] = []
    model = ScriptedChatModel(
        script=[[("browser_scroll", {"to": f"#s{i}"})] for i in range(6)]
        + [[("browser-type", TYPE_ARGS)]] * 10
    )
    guard = ReplayGuard()
    node = guard.wrap(ToolNode(browser_tools(runs), wrap_tool_call=dynamic))

    def agent(state: ReplayGuardState) -> dict:
        return {"messages": [model.invoke([guard.system_prompt(state), *state["messages"]])]}

    builder = StateGraph(ReplayGuardState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_conditional_edges("tools", guard.route_after_tools("agent"))
    graph = builder.compile(checkpointer=InMemorySaver())
    graph.invoke(user(), thread())
    assert served == [f"#s{i}" for i in range(6)]
    assert model.calls == 6 + 4, "then the hallucinated name is stopped at its 4th call"
    assert guard.inspect(graph.get_state(thread())).stop_reason == "unknown_tool"
