"""`ReplayGuardMiddleware` in a real `create_agent` agent with a scripted looping model."""

from __future__ import annotations

import asyncio
import os

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_replay_guard import (
    GUARD_CHANNEL,
    GuardConfig,
    LoopAbortedError,
    ReplayGuard,
    ReplayGuardMiddleware,
    ToolPolicy,
)
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import POLICY, SYSTEM, ToolRuns, build_agent, contents, make_tools

os.environ["LANGSMITH_TRACING"] = "false"


def run_agent(model, *, config=POLICY, thread="t1", message="help me"):
    runs = ToolRuns()
    guard = ReplayGuard(config)
    agent = build_agent(guard, model, make_tools(runs), checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": thread}}
    out = agent.invoke({"messages": [HumanMessage(message)]}, cfg)
    return agent, cfg, out, runs, guard


def warned(model):
    return [p is not None and "LOOP WARNING" in p for p in model.system_prompts]


def test_same_read_96_times():
    model = ScriptedChatModel.looping("get_details_by_id", {"id": "P1002"}, times=96)
    agent, cfg, out, runs, guard = run_agent(model)
    assert runs["get_details_by_id"] == 1
    assert model.calls == 4
    assert isinstance(out["messages"][-1], AIMessage)
    assert out["messages"][-1].response_metadata["replay_guard_stop"] == "repeat_limit"
    assert warned(model) == [False, False, True, True]
    assert model.system_prompts[2].startswith(SYSTEM)
    assert guard.inspect(agent.get_state(cfg)).stop_reason == "repeat_limit"


def test_same_side_effect_100_times():
    model = ScriptedChatModel.looping("transfer_to_human_agents", {"summary": "s"}, times=100)
    _, _, out, runs, _ = run_agent(model)
    assert runs["transfer_to_human_agents"] == 3
    assert model.calls == 4
    assert out["messages"][-2].text.startswith("Stopped")


def test_cycle_with_a_failing_write():
    step = [("book_reservation", {"flight": "HAT030"})], [("think", {"thought": "hmm"})]
    model = ScriptedChatModel(script=[s for _ in range(10) for s in step])
    _, _, out, runs, _ = run_agent(model)
    # The failed write may have written: the thought after it runs, and the cycle is stopped.
    assert runs["book_reservation"] == 2
    assert runs["think"] == 2
    assert out["messages"][-1].response_metadata["replay_guard_stop"] == "cycle"
    assert "stopped" in out["messages"][-1].text


def test_identical_parallel_calls_run_once_across_send_tasks():
    batch = [("get_details_by_id", {"id": "L1"})] * 3
    model = ScriptedChatModel(script=[batch])
    agent, cfg, out, runs, guard = run_agent(model)
    assert runs["get_details_by_id"] == 1
    statuses = [m.status for m in out["messages"] if isinstance(m, ToolMessage)]
    assert statuses == ["success", "error", "error"]
    assert guard.inspect(agent.get_state(cfg)).totals.calls == 3


def test_reminder_goes_to_one_model_call_only_and_never_into_history():
    script = [[("get_details_by_id", {"id": "P1"})], [("get_details_by_id", {"id": "P1"})]]
    script += [[("get_details_by_id", {"id": "P2"})]]
    model = ScriptedChatModel(script=script)
    agent, cfg, _out, _, _ = run_agent(model)
    assert warned(model) == [False, False, True, False]
    assert not any(isinstance(m, SystemMessage) for m in agent.get_state(cfg).values["messages"])


def test_private_channel_is_checkpointed_but_not_in_input_or_output():
    model = ScriptedChatModel(script=[[("get_details_by_id", {"id": "P1"})]])
    agent, cfg, out, _, _ = run_agent(model)
    assert GUARD_CHANNEL in agent.get_state(cfg).values
    assert GUARD_CHANNEL not in out
    schema = agent.get_input_jsonschema()
    assert GUARD_CHANNEL not in schema.get("properties", {})


def test_async_ainvoke_and_astream_match_sync():
    def model():
        script = [[("get_details_by_id", {"id": "A"}), ("get_details_by_id", {"id": "A"})]]
        return ScriptedChatModel(
            script=script + [[("transfer_to_human_agents", {"summary": "s"})]] * 5
        )

    _, _, sync_out, sync_runs, _ = run_agent(model())

    async def arun(stream):
        runs = ToolRuns()
        agent = build_agent(
            ReplayGuard(POLICY), model(), make_tools(runs), checkpointer=InMemorySaver()
        )
        cfg = {"configurable": {"thread_id": "t1"}}
        inputs = {"messages": [HumanMessage("help me")]}
        if stream:
            async for _ in agent.astream(inputs, cfg):
                pass
            return (await agent.aget_state(cfg)).values, runs
        return await agent.ainvoke(inputs, cfg), runs

    for stream in (False, True):
        out, runs = asyncio.run(arun(stream))
        assert contents(out["messages"]) == contents(sync_out["messages"])
        assert runs.counts == sync_runs.counts


def test_several_guard_instances_coexist_with_distinct_names():
    runs = ToolRuns()
    general = ReplayGuardMiddleware(POLICY)
    strict = ReplayGuardMiddleware(
        GuardConfig(tools={"get_details_by_id": ToolPolicy(max_repeats=2)}), name="strict"
    )
    model = ScriptedChatModel.looping("get_details_by_id", {"id": "P"}, times=10)
    agent = create_agent(
        model, make_tools(runs), middleware=[strict, general], checkpointer=InMemorySaver()
    )
    cfg = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("x")]}, cfg)
    values = agent.get_state(cfg).values
    assert {GUARD_CHANNEL, f"{GUARD_CHANNEL}__strict"} <= set(values)
    assert runs["get_details_by_id"] == 1
    strict_view = ReplayGuard().inspect(values[f"{GUARD_CHANNEL}__strict"])
    general_view = ReplayGuard().inspect(values[GUARD_CHANNEL])
    assert strict_view.stop_reason == "repeat_limit"
    assert model.calls == 3, "the strict (outer) instance stops at the 3rd attempt"
    # The inner guard ran the first call and counts the second, which the outer guard
    # answered as a duplicate (every call counts, whoever answers it); the run stopped
    # before a model call after the third could count it.
    assert (strict_view.totals.calls, general_view.totals.calls) == (3, 2)


def test_on_abort_error_raises():
    model = ScriptedChatModel.looping("transfer_to_human_agents", {"summary": "s"}, times=10)
    with pytest.raises(LoopAbortedError):
        run_agent(model, config=POLICY.model_copy(update={"exit_behavior": "error"}))


def test_on_abort_continue_lets_the_agent_finish():
    model = ScriptedChatModel.looping("transfer_to_human_agents", {"summary": "s"}, times=5)
    _, _, out, runs, _ = run_agent(
        model, config=POLICY.model_copy(update={"exit_behavior": "continue"})
    )
    assert runs["transfer_to_human_agents"] == 3
    assert out["messages"][-1].text == "Done."


def test_new_user_message_resets_the_turn():
    model = ScriptedChatModel(
        script=[[("get_details_by_id", {"id": "P"})], "ok", [("get_details_by_id", {"id": "P"})]]
    )
    runs = ToolRuns()
    agent = build_agent(ReplayGuard(POLICY), model, make_tools(runs), checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [HumanMessage("show P")]}, cfg)
    agent.invoke({"messages": [HumanMessage("show P again")]}, cfg)
    assert runs["get_details_by_id"] == 2


def test_unregistered_tool_gets_the_agents_usual_answer():
    model = ScriptedChatModel(script=[[("no_such_tool", {})]])
    _, _, out, _, _ = run_agent(model)
    answer = next(m for m in out["messages"] if isinstance(m, ToolMessage))
    assert answer.status == "error"
    assert "no_such_tool" in answer.text


def test_guard_middleware_shortcut_shares_the_configuration():
    guard = ReplayGuard(POLICY)
    middleware = guard.middleware()
    assert isinstance(middleware, ReplayGuardMiddleware)
    assert middleware.guard.config is guard.config
    assert middleware.name == "ReplayGuardMiddleware"
    assert guard.middleware(name="b").name == "b"


def test_the_stop_message_carries_the_agents_name():
    # Supervisors and swarms tell agents apart by AIMessage.name (create_agent(name=...)).
    model = ScriptedChatModel.looping("get_details_by_id", {"id": "P1002"}, times=10)
    agent = create_agent(
        model, make_tools(ToolRuns()), name="billing", middleware=[ReplayGuardMiddleware()]
    )
    out = agent.invoke({"messages": [HumanMessage("help me")]})
    assert out["messages"][-1].response_metadata["replay_guard_stop"] == "repeat_limit"
    assert out["messages"][-1].name == "billing"
