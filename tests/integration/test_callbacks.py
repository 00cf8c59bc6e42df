"""`ReplayGuardCallbackHandler` on real executors: create_agent (sync, async) and AgentExecutor."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ShellToolMiddleware, dynamic_prompt
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import ToolException, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import (
    GuardConfig,
    LoopAbortedError,
    ReplayGuard,
    ReplayGuardCallbackHandler,
)
from langgraph_replay_guard.integrations.callbacks import ToolCallBlockedError
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import warm_children
from tests.integration.graphs import POLICY, SYSTEM, ToolRuns, make_tools

# The tests that build a langchain_classic AgentExecutor run on one xdist worker: every worker
# collects this module, and only the one that runs them imports langchain_classic (0.3 s).
CLASSIC = pytest.mark.xdist_group("langchain-classic")

os.environ["LANGSMITH_TRACING"] = "false"

REPO_ROOT = Path(__file__).resolve().parents[2]
PROC_SCRIPT = Path(__file__).with_name("proc_callbacks.py")
LOOKUP = ("get_details_by_id", {"id": "P1002"})
PROMPT = ChatPromptTemplate.from_messages(
    [("system", SYSTEM), ("human", "{input}"), ("placeholder", "{agent_scratchpad}")]
)


def looking_up(times, *, then="Here is the plan."):
    """A model that asks for the same lookup `times` times, then answers `then`."""
    return ScriptedChatModel(script=[[LOOKUP]] * times + [then])


def agent_for(model, runs, **kwargs):
    return create_agent(model, make_tools(runs), system_prompt=SYSTEM, **kwargs)


def run_agent(model, *, config=POLICY, thread="t1", handler=None):
    runs = ToolRuns()
    handler = handler or ReplayGuardCallbackHandler(config)
    agent = agent_for(model, runs, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": thread}, "callbacks": [handler.check(agent)]}
    out = agent.invoke({"messages": [HumanMessage("help me")]}, cfg)
    return out, runs, handler


def executor_for(model, runs, **kwargs):
    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent

    tools = make_tools(runs)
    agent = create_tool_calling_agent(model, tools, PROMPT)
    return AgentExecutor(agent=agent, tools=tools, handle_parsing_errors=True, **kwargs)


def tool_node_graph(model, runs, *, handle_tool_errors):
    """A hand-written agent graph whose ToolNode has the given error handling."""
    builder = StateGraph(MessagesState)
    builder.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    builder.add_node("tools", ToolNode(make_tools(runs), handle_tool_errors=handle_tool_errors))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile()


def tool_answers(messages):
    return [m for m in messages if isinstance(m, ToolMessage)]


# -- create_agent -------------------------------------------------------------------------------


def test_create_agent_runs_a_repeated_read_once_and_the_model_sees_why():
    model = looking_up(4)
    out, runs, handler = run_agent(model)
    assert runs["get_details_by_id"] == 1
    answers = tool_answers(out["messages"])
    assert [m.status for m in answers] == ["success", "error", "error", "error"]
    assert answers[1].text.startswith("Not executed: 'get_details_by_id' already succeeded")
    assert "Premium Plan" in answers[1].text, "a duplicate carries the earlier result's preview"
    assert answers[3].text.startswith("Stopped: 'get_details_by_id' was called 4 times")
    assert "answer the user now" in answers[3].text
    # The model read every refusal before its next call, and the run finished normally.
    assert answers[1].text in [m.content for m in model.seen[2]]
    assert out["messages"][-1].text == "Here is the plan."
    view = handler.inspect("t1")
    assert view.stop_reason == "repeat_limit"
    assert [b[1] for b in view.blocked] == ["duplicate", "duplicate", "repeat_limit"]


def test_create_agent_async_matches_sync():
    sync_out, sync_runs, _ = run_agent(looking_up(4))

    async def arun():
        runs = ToolRuns()
        handler = ReplayGuardCallbackHandler(POLICY)
        agent = agent_for(looking_up(4), runs, checkpointer=InMemorySaver())
        cfg = {"configurable": {"thread_id": "t1"}, "callbacks": [handler]}
        return await agent.ainvoke({"messages": [HumanMessage("help me")]}, cfg), runs

    out, runs = asyncio.run(arun())
    assert runs.counts == sync_runs.counts
    assert [m.text for m in tool_answers(out["messages"])] == [
        m.text for m in tool_answers(sync_out["messages"])
    ]


def test_async_with_a_store_runs_the_handler_off_the_event_loop():
    # With a store the handler is not run inline: LangChain calls it in a worker thread,
    # and its refusals still reach the model.
    async def arun():
        runs = ToolRuns()
        handler = ReplayGuardCallbackHandler(POLICY, store=InMemoryStore())
        assert handler.run_inline is False
        agent = agent_for(ScriptedChatModel(script=[[LOOKUP] * 2, [LOOKUP], "ok"]), runs)
        cfg = {"configurable": {"thread_id": "t"}, "callbacks": [handler]}
        return await agent.ainvoke({"messages": [HumanMessage("x")]}, cfg), runs

    out, runs = asyncio.run(arun())
    assert runs["get_details_by_id"] == 1
    assert [m.status for m in tool_answers(out["messages"])] == ["success", "error", "error"]


def test_a_new_user_message_starts_a_new_turn():
    handler = ReplayGuardCallbackHandler(POLICY)
    runs = ToolRuns()
    agent = agent_for(
        ScriptedChatModel(script=[[LOOKUP], "ok", [LOOKUP], "ok"]),
        runs,
        checkpointer=InMemorySaver(),
    )
    cfg = {"configurable": {"thread_id": "t"}, "callbacks": [handler]}
    agent.invoke({"messages": [HumanMessage("show P1002")]}, cfg)
    agent.invoke({"messages": [HumanMessage("show it again")]}, cfg)
    assert runs["get_details_by_id"] == 2
    assert handler.inspect("t").totals.calls == 2


def test_on_abort_continue_blocks_only_the_call():
    config = POLICY.model_copy(update={"exit_behavior": "continue"})
    model = ScriptedChatModel.looping("transfer_to_human_agents", {"summary": "s"}, times=5)
    out, runs, handler = run_agent(model, config=config)
    assert runs["transfer_to_human_agents"] == 3
    assert out["messages"][-1].text == "Done."
    assert handler.inspect("t1").stop_reason is None


def test_a_model_that_ignores_the_stop_is_aborted_before_more_calls():
    model = ScriptedChatModel.looping(*LOOKUP, times=96)
    with pytest.raises(LoopAbortedError, match="after the loop guard stopped the run"):
        run_agent(model)
    assert model.calls == 5, "one model call to answer after the stop, then the run ends"
    last_seen = model.seen[-1][-1]
    assert isinstance(last_seen, ToolMessage)
    assert last_seen.text.startswith("Stopped:")


def test_side_effects_are_counted_not_deduplicated():
    model = ScriptedChatModel(
        script=[[("transfer_to_human_agents", {"summary": "s"})]] * 4 + ["Transferred."]
    )
    out, runs, _ = run_agent(model)
    assert runs["transfer_to_human_agents"] == 3
    assert tool_answers(out["messages"])[-1].text.startswith("Stopped:")


def test_identical_parallel_calls_in_one_batch_run_once():
    model = ScriptedChatModel(script=[[LOOKUP] * 3])
    out, runs, handler = run_agent(model)
    assert runs["get_details_by_id"] == 1
    assert [m.status for m in tool_answers(out["messages"])] == ["success", "error", "error"]
    assert handler.inspect("t1").totals.calls == 3


def test_on_abort_error_raises_before_the_aborting_call_runs():
    config = POLICY.model_copy(update={"exit_behavior": "error"})
    model = ScriptedChatModel.looping("transfer_to_human_agents", {"summary": "s"}, times=10)
    runs = ToolRuns()
    handler = ReplayGuardCallbackHandler(config)
    agent = agent_for(model, runs, checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}, "callbacks": [handler]}
    with pytest.raises(LoopAbortedError) as caught:
        agent.invoke({"messages": [HumanMessage("help me")]}, cfg)
    assert caught.value.reason == "repeat_limit"
    assert runs["transfer_to_human_agents"] == 3
    # Raised when the model asked: no unanswered tool call is left in the thread.
    last = agent.get_state(cfg).values["messages"][-1]
    assert isinstance(last, ToolMessage)


def test_on_abort_error_still_raises_when_the_tool_node_handles_every_error():
    # A ToolNode with handle_tool_errors=True turns any exception into a ToolMessage; the
    # handler then stops the run at the next model call.
    config = POLICY.model_copy(update={"exit_behavior": "error"})
    runs = ToolRuns()
    model = ScriptedChatModel.looping("transfer_to_human_agents", {"summary": "s"}, times=10)
    graph = tool_node_graph(model, runs, handle_tool_errors=True)
    handler = ReplayGuardCallbackHandler(config).check(graph)
    with pytest.raises(LoopAbortedError):
        graph.invoke(
            {"messages": [HumanMessage("x")]},
            {"configurable": {"thread_id": "t"}, "callbacks": [handler]},
        )
    assert runs["transfer_to_human_agents"] == 3


def test_reminder_in_a_dynamic_prompt_reaches_exactly_the_next_model_call():
    handler = ReplayGuardCallbackHandler(POLICY)

    @dynamic_prompt
    def prompt(request):
        thread_id = request.runtime.execution_info.thread_id
        reminder = handler.reminder(thread_id)
        return f"{SYSTEM}\n\n{reminder}" if reminder else SYSTEM

    model = ScriptedChatModel(script=[[LOOKUP], [LOOKUP], [("get_details_by_id", {"id": "P2"})]])
    runs = ToolRuns()
    agent = create_agent(model, make_tools(runs), middleware=[prompt])
    cfg = {"configurable": {"thread_id": "t"}, "callbacks": [handler]}
    out = agent.invoke({"messages": [HumanMessage("help me")]}, cfg)
    warned = [p is not None and "LOOP WARNING" in p for p in model.system_prompts]
    assert warned == [False, False, True, False]
    assert "Premium Plan" not in model.system_prompts[2], "tool output never enters the prompt"
    assert not any("LOOP WARNING" in str(m.content) for m in out["messages"])
    assert handler.reminder("t") is None, "read once"


def test_decisions_are_on_the_custom_stream():
    handler = ReplayGuardCallbackHandler(POLICY)
    agent = agent_for(looking_up(2), ToolRuns())
    cfg = {"configurable": {"thread_id": "t"}, "callbacks": [handler]}
    chunks = list(agent.stream({"messages": [HumanMessage("x")]}, cfg, stream_mode="custom"))
    assert [c["replay_guard"]["reason"] for c in chunks] == ["duplicate"]


def test_a_model_called_inside_a_tool_is_not_mistaken_for_the_agent():
    handler = ReplayGuardCallbackHandler(POLICY)
    inner = ScriptedChatModel(script=["summary"] * 5)

    @tool
    def summarize(text: str) -> str:
        """Summarize a text with a model."""
        return inner.invoke([HumanMessage(text)]).text

    @dynamic_prompt
    def prompt(request):
        return handler.reminder(request.runtime.execution_info.thread_id) or SYSTEM

    model = ScriptedChatModel(script=[[LOOKUP], [LOOKUP, ("summarize", {"text": "a"})], "ok"])
    runs = ToolRuns()
    agent = create_agent(model, [*make_tools(runs), summarize], middleware=[prompt])
    cfg = {"configurable": {"thread_id": "t"}, "callbacks": [handler]}
    agent.invoke({"messages": [HumanMessage("x")]}, cfg)
    assert inner.calls == 1
    # The inner model's answer is not the agent's: the reminder still reaches the agent.
    assert "LOOP WARNING" in model.system_prompts[2]
    assert handler.inspect("t").totals.calls == 3


# -- AgentExecutor (langchain-classic) ------------------------------------------------------------


def run_executor(model, *, config=POLICY, metadata=None, **kwargs):
    runs = ToolRuns()
    handler = ReplayGuardCallbackHandler(config)
    executor = executor_for(model, runs, **kwargs)
    cfg = {"callbacks": [handler.check(executor)], "metadata": metadata or {"thread_id": "e1"}}
    return executor.invoke({"input": "help me"}, cfg), runs, handler


@CLASSIC
def test_agent_executor_refuses_the_repeat_and_tells_the_model():
    model = looking_up(4)
    out, runs, handler = run_executor(model)
    assert out["output"] == "Here is the plan."
    assert runs["get_details_by_id"] == 1
    # The tool-calling agent shows a refused step to the model as a message in its scratchpad.
    notes = [m.text for m in model.seen[-1] if isinstance(m, AIMessage) and m.text]
    assert notes[0].startswith("Not executed: 'get_details_by_id' already succeeded")
    assert notes[-1].startswith("Stopped:")
    assert handler.inspect("e1").stop_reason == "repeat_limit"


@CLASSIC
def test_agent_executor_reminder_through_a_prompt_partial():
    from langchain_classic.agents import AgentExecutor, create_tool_calling_agent

    handler = ReplayGuardCallbackHandler(POLICY)
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", SYSTEM + "{reminder}"),
            ("human", "{input}"),
            ("placeholder", "{agent_scratchpad}"),
        ]
    ).partial(reminder=lambda: "\n\n" + (handler.reminder("e1") or ""))
    model = ScriptedChatModel(script=[[LOOKUP], [LOOKUP], "done"])
    runs = ToolRuns()
    tools = make_tools(runs)
    executor = AgentExecutor(
        agent=create_tool_calling_agent(model, tools, prompt),
        tools=tools,
        handle_parsing_errors=True,
    )
    executor.invoke({"input": "x"}, {"callbacks": [handler], "metadata": {"thread_id": "e1"}})
    warned = ["LOOP WARNING" in (p or "") for p in model.system_prompts]
    assert warned == [False, False, True]


@CLASSIC
def test_react_agent_sees_the_refusal_as_its_observation():
    from langchain_classic.agents import AgentExecutor, create_react_agent
    from langchain_core.prompts import PromptTemplate

    template = (
        "Answer with the tools {tools} ({tool_names}).\n"
        "Question: {input}\nThought:{agent_scratchpad}"
    )
    act = "I will look it up.\nAction: get_details_by_id\nAction Input: P1002"
    model = ScriptedChatModel(script=[act, act, "Final Answer: done"])
    runs = ToolRuns()
    tools = make_tools(runs)
    agent = create_react_agent(model, tools, PromptTemplate.from_template(template))
    executor = AgentExecutor(agent=agent, tools=tools, handle_parsing_errors=True)
    handler = ReplayGuardCallbackHandler(POLICY).check(executor)
    out = executor.invoke({"input": "x"}, {"callbacks": [handler]})
    assert out["output"] == "done"
    assert runs["get_details_by_id"] == 1, "the ReAct agent passes a plain string; keyed as is"
    assert "Observation: Not executed: 'get_details_by_id' already succeeded" in (
        model.seen[-1][-1].text
    )


@CLASSIC
def test_agent_executor_async():
    async def arun():
        runs = ToolRuns()
        handler = ReplayGuardCallbackHandler(POLICY)
        executor = executor_for(looking_up(4), runs)
        cfg = {"callbacks": [handler], "metadata": {"thread_id": "e1"}}
        return await executor.ainvoke({"input": "help me"}, cfg), runs, handler

    out, runs, handler = asyncio.run(arun())
    assert out["output"] == "Here is the plan."
    assert runs["get_details_by_id"] == 1
    assert handler.inspect("e1").totals.blocked == 3


@CLASSIC
def test_agent_executor_aborts_a_model_that_ignores_the_stop():
    model = ScriptedChatModel.looping(*LOOKUP, times=50)
    with pytest.raises(LoopAbortedError):
        run_executor(model)
    assert model.calls == 5


@CLASSIC
def test_agent_executor_on_abort_error():
    model = ScriptedChatModel.looping("transfer_to_human_agents", {"summary": "s"}, times=10)
    with pytest.raises(LoopAbortedError) as caught:
        run_executor(model, config=POLICY.model_copy(update={"exit_behavior": "error"}))
    assert caught.value.reason == "repeat_limit"


@CLASSIC
def test_agent_executor_refuses_a_whole_step_and_says_which_call():
    step = [LOOKUP, ("get_details_by_id", {"id": "OTHER"})]
    model = ScriptedChatModel(script=[[LOOKUP], step, "done"])
    out, runs, _ = run_executor(model)
    assert out["output"] == "done"
    assert runs["get_details_by_id"] == 1, "a refused step runs none of its calls"
    note = [m.text for m in model.seen[-1] if isinstance(m, AIMessage) and m.text][-1]
    assert "Not executed: 'get_details_by_id' already succeeded" in note
    assert "ask for it again" in note


@CLASSIC
def test_agent_executor_without_parsing_error_handling_fails_loudly():
    runs = ToolRuns()
    executor = executor_for(looking_up(2), runs)
    executor.handle_parsing_errors = False
    handler = ReplayGuardCallbackHandler(POLICY)
    with pytest.raises(ValueError, match="handle_parsing_errors=True"):
        handler.check(executor)
    with pytest.raises(ValueError, match="handle_parsing_errors=True"):
        executor.invoke({"input": "x"}, {"callbacks": [handler]})
    assert runs["get_details_by_id"] == 1


# -- setup checks --------------------------------------------------------------------------------


@CLASSIC
def test_check_rejects_setups_that_cannot_enforce():
    handler = ReplayGuardCallbackHandler()
    runs = ToolRuns()
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(make_tools(runs), handle_tool_errors=False))
    builder.add_edge(START, "tools")
    with pytest.raises(ValueError, match="handle_tool_errors=False"):
        handler.check(builder.compile())

    plain = StateGraph(MessagesState)
    plain.add_node("work", lambda state: state)
    plain.add_edge(START, "work")
    with pytest.raises(ValueError, match="no ToolNode"):
        handler.check(plain.compile())

    with pytest.raises(TypeError, match="compiled LangGraph graph"):
        handler.check(object())
    executor = executor_for(looking_up(1), runs)
    executor.handle_parsing_errors = "Try again."
    with pytest.raises(ValueError, match="instead of why"):
        handler.check(executor)


def test_without_a_working_setup_a_refusal_fails_the_run_instead_of_running_the_tool():
    runs = ToolRuns()
    graph = tool_node_graph(looking_up(3), runs, handle_tool_errors=False)
    cfg = {"configurable": {"thread_id": "t"}, "callbacks": [ReplayGuardCallbackHandler()]}
    with pytest.raises(ToolCallBlockedError, match="already succeeded"):
        graph.invoke({"messages": [HumanMessage("x")]}, cfg)
    assert runs["get_details_by_id"] == 1


# -- bad input -----------------------------------------------------------------------------------


@CLASSIC
def test_plain_string_tool_input_is_keyed_as_it_is():
    # The tool-calling agent passes `__arg1` to the tool as a plain string, not a dict.
    model = ScriptedChatModel(script=[[("get_details_by_id", {"__arg1": "P1002"})]] * 2 + ["ok"])
    out, runs, handler = run_executor(model)
    assert out["output"] == "ok"
    assert runs["get_details_by_id"] == 1
    assert handler.inspect("e1").blocked[0][1] == "duplicate"


def test_a_failed_call_may_be_retried_and_an_unhandled_error_is_recorded():
    attempts = []

    @tool
    def flaky(id: str) -> str:
        """Fails the first time."""
        attempts.append(id)
        if len(attempts) == 1:
            msg = "upstream timeout"
            raise ToolException(msg)
        return "ok"

    flaky.handle_tool_error = True

    @tool
    def broken(id: str) -> str:
        """Always raises."""
        msg = "boom"
        raise RuntimeError(msg)

    call = [("flaky", {"id": "1"})]
    model = ScriptedChatModel(script=[call, call, call, [("broken", {"id": "1"})]])
    handler = ReplayGuardCallbackHandler()
    agent = create_agent(model, [flaky, broken])
    cfg = {"configurable": {"thread_id": "t"}, "callbacks": [handler]}
    with pytest.raises(RuntimeError, match="boom"):  # create_agent re-raises tool errors
        agent.invoke({"messages": [HumanMessage("x")]}, cfg)
    assert len(attempts) == 2, "the retry after a failure ran, the third identical call did not"
    outcomes = [(c.tool, c.outcome) for c in handler.inspect("t").recent_calls]
    assert outcomes == [("flaky", "failure"), ("flaky", "success"), ("broken", "failure")]


@CLASSIC
def test_runs_without_a_thread_id_get_their_own_scope():
    handler = ReplayGuardCallbackHandler(POLICY)
    runs = ToolRuns()
    for _ in range(2):
        agent = agent_for(looking_up(2, then="ok"), runs)
        agent.invoke({"messages": [HumanMessage("x")]}, {"callbacks": [handler]})
    # Within a run the repeat is refused; a second run does not inherit the first one's calls.
    assert runs["get_details_by_id"] == 2
    for _ in range(2):
        executor = executor_for(looking_up(2, then="ok"), runs)
        executor.invoke({"input": "x"}, {"callbacks": [handler]})
    assert runs["get_details_by_id"] == 4


def test_concurrent_runs_on_different_threads_never_mix():
    handler = ReplayGuardCallbackHandler(POLICY)
    results = {}
    errors = []

    def worker(n):
        try:
            runs = ToolRuns()
            args = {"id": f"C{n}"}
            model = ScriptedChatModel(script=[[("get_details_by_id", args)]] * 3 + ["ok"])
            agent = agent_for(model, runs)
            cfg = {"configurable": {"thread_id": f"w{n}"}, "callbacks": [handler]}
            out = agent.invoke({"messages": [HumanMessage("x")]}, cfg)
            results[n] = (runs["get_details_by_id"], tool_answers(out["messages"]))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for n, (ran, answers) in results.items():
        assert ran == 1
        assert f"C{n}" in answers[1].text, "the duplicate's preview is this thread's result"
        assert not any(f"C{m}" in a.text for a in answers for m in range(8) if m != n)
        assert handler.inspect(f"w{n}").totals.calls == 3


# -- state: eviction and stores ------------------------------------------------------------------


def test_least_recently_used_threads_are_evicted():
    handler = ReplayGuardCallbackHandler(POLICY, max_threads=2)
    for thread in ("a", "b", "c"):
        run_agent(looking_up(1), thread=thread, handler=handler)
    assert handler.inspect("a").totals.calls == 0
    assert handler.inspect("c").totals.calls == 1
    with pytest.raises(ValueError, match="max_threads"):
        ReplayGuardCallbackHandler(max_threads=0)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_store_shares_the_state_between_handlers(kind, tmp_path):
    config = POLICY.model_copy(update={"scope": "thread"})

    def run_with(store, runs):
        handler = ReplayGuard(config, store=store).callback_handler()
        agent = agent_for(looking_up(1, then="ok"), runs)
        cfg = {"configurable": {"thread_id": "shared"}, "callbacks": [handler]}
        agent.invoke({"messages": [HumanMessage("x")]}, cfg)
        return handler

    runs = ToolRuns()
    if kind == "memory":
        store = InMemoryStore()
        run_with(store, runs)
        second = run_with(store, runs)
    else:
        path = str(tmp_path / "guard.db")
        with SqliteStore.from_conn_string(path) as store:
            store.setup()
            run_with(store, runs)
        with SqliteStore.from_conn_string(path) as store:
            second = run_with(store, runs)
            assert second.inspect("shared").totals.calls == 2
    assert runs["get_details_by_id"] == 1, "the second handler saw the first one's success"


def test_processes_share_a_thread_through_a_sqlite_store(tmp_path):
    path = str(tmp_path / "guard.db")

    def run_process():
        result = warm_children.run(
            [sys.executable, str(PROC_SCRIPT), path, "p", "1"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "LANGSMITH_TRACING": "false"},
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout.strip().splitlines()[-1])

    assert run_process() == {"runs": 1, "calls": 1}
    assert run_process() == {"runs": 0, "calls": 2}


def test_guard_callback_handler_shortcut():
    store = InMemoryStore()
    guard = ReplayGuard(GuardConfig(max_repeats=2), store=store)
    handler = guard.callback_handler(max_threads=5)
    assert isinstance(handler, ReplayGuardCallbackHandler)
    assert handler.config is guard.config
    assert handler.raise_error is True
    assert handler.run_inline is False, "store I/O must not block the event loop"
    assert ReplayGuard().callback_handler().run_inline is True


# -- the agent's whole tool set: the tools its middleware serve are tools too -----------------


@tool
def search_notes(query: str) -> str:
    """Search the notes (a tool a middleware brings)."""
    return f"notes about {query}"


class NotesMiddleware(AgentMiddleware):
    """A middleware with a tool of its own (as ShellToolMiddleware, deepagents' file tools)."""

    tools = [search_notes]  # noqa: RUF012 - AgentMiddleware declares it a class attribute


class OfferedNotesMiddleware(AgentMiddleware):
    """A middleware that offers the model a tool the tools node lacks, and serves it itself."""

    def wrap_model_call(self, request, handler):
        return handler(request.override(tools=[*request.tools, search_notes]))

    def wrap_tool_call(self, request, handler):
        if request.tool_call["name"] == "search_notes":
            return handler(request.override(tool=search_notes))
        return handler(request)


class OfferingModel(ScriptedChatModel):
    """A scripted model that, like a real one, is given its tools in its invocation params."""

    def bind_tools(self, tools, **kwargs):
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)


NOTES = ("search_notes", {"query": "refunds"})
HALLUCINATED = ("search-notes", {"query": "refunds"})


def _run_with(middleware, model):
    runs = ToolRuns()
    handler = ReplayGuardCallbackHandler(POLICY)
    agent = agent_for(model, runs, middleware=[middleware], checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t1"}, "callbacks": [handler.check(agent)]}
    out = agent.invoke({"messages": [HumanMessage("help me")]}, cfg)
    return [m.text for m in out["messages"] if isinstance(m, ToolMessage)], handler


@pytest.mark.parametrize("model_class", [ScriptedChatModel, OfferingModel])
def test_check_learns_the_tools_a_middleware_serves(model_class):
    model = model_class(script=[[NOTES], [HALLUCINATED], "Done."])
    texts, handler = _run_with(NotesMiddleware(), model)
    assert texts[0] == "notes about refunds", "a middleware's tool is a tool, not unknown"
    assert "is not a valid tool" in texts[1], "a name nobody has is still unknown"
    assert handler.inspect("t1").blocked == (("search-notes", "unknown_tool", 1),)


def test_a_tool_a_middleware_offers_the_model_is_learned_from_the_model_call():
    model = OfferingModel(script=[[NOTES], [NOTES], [HALLUCINATED], "Done."])
    texts, handler = _run_with(OfferedNotesMiddleware(), model)
    assert texts[0] == "notes about refunds"
    assert "already" in texts[1].lower(), "the identical read is deduplicated, not unknown"
    assert "is not a valid tool" in texts[2]
    reasons = [reason for _tool, reason, _count in handler.inspect("t1").blocked]
    assert reasons == ["duplicate", "unknown_tool"]


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.skipif(shutil.which("bash") is None, reason="ShellToolMiddleware runs bash")
def test_check_learns_the_shell_tool_of_shell_tool_middleware(tmp_path):
    model = ScriptedChatModel(script=[[("shell", {"command": "echo hi"})], "Done."])
    texts, handler = _run_with(ShellToolMiddleware(workspace_root=tmp_path), model)
    assert "hi" in texts[0]
    assert handler.inspect("t1").blocked == ()


def test_offered_tool_names_in_each_provider_format():
    from langgraph_replay_guard.integrations.callbacks.handler import _offered_tools

    params = {
        "tools": [
            {"type": "function", "function": {"name": "a"}},  # OpenAI
            {"name": "b", "input_schema": {}},  # Anthropic
            {"function_declarations": [{"name": "c"}, {"name": "d"}]},  # Google
            search_notes,  # the tool itself
            {"type": "web_search_preview"},  # a provider's built-in tool: no name
        ]
    }
    assert _offered_tools(params) == ["a", "b", "c", "d", "search_notes"]
    assert _offered_tools({}) == _offered_tools(None) == []


def test_checking_a_graph_does_not_import_langchain_classic():
    # Whether an agent is an AgentExecutor is asked of every agent `check` sees; importing
    # langchain_classic to ask cost each graph's first check about 0.3 s of CPU.
    script = (
        "import sys\n"
        "from langchain.agents import create_agent\n"
        "from langgraph_replay_guard import ReplayGuardCallbackHandler\n"
        "from langgraph_replay_guard.testing import ScriptedChatModel\n"
        "from tests.integration.graphs import ToolRuns, make_tools\n"
        "agent = create_agent(ScriptedChatModel(script=['ok']), make_tools(ToolRuns()))\n"
        "ReplayGuardCallbackHandler().check(agent)\n"
        "print('langchain_classic.agents' in sys.modules)\n"
    )
    result = warm_children.run(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(REPO_ROOT)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False"]
