"""Recording real guarded runs (custom graph, create_agent) and replaying them exactly.

A replay must give back what `invoke` returned without calling the model, the tools or the
graph; runs that fail, are interrupted, are killed, or cannot be recorded get the record
state a user can trust.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_replay_guard import (
    LoopAbortedError,
    NotReplayableError,
    RecordStore,
    ReplayedRunError,
    ReplayEngine,
    ReplayGuard,
    ReplayGuardMiddleware,
    ReplayHashMismatchError,
    verify_record_integrity,
)
from langgraph_replay_guard.testing import ScriptedChatModel, agent_graph
from tests import warm_children
from tests.integration.graphs import POLICY, ToolRuns, build_agent, build_custom_graph, make_tools

os.environ["LANGSMITH_TRACING"] = "false"

PROC_SCRIPT = Path(__file__).with_name("proc_record.py")
REPO_ROOT = Path(__file__).resolve().parents[2]
ARGS = {"id": "P1002"}
BUILDERS = [build_custom_graph, build_agent]


def ask(text: str = "Show me plan P1002.") -> dict[str, Any]:
    return {"messages": [HumanMessage(content=text)]}


@pytest.mark.parametrize("builder", BUILDERS, ids=["custom_graph", "create_agent"])
def test_recorded_run_replays_exactly_without_calls(builder: Any, any_store: BaseStore) -> None:
    runs = ToolRuns()
    guard = ReplayGuard(POLICY, store=any_store, record=True)
    model = ScriptedChatModel.looping("get_details_by_id", ARGS, times=6, final="Done.")
    graph = guard.record(builder(guard, model, make_tools(runs)))
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex}"}}
    output = graph.invoke(ask(), config)
    execution_id = graph.last_execution_id
    assert execution_id is not None
    model_calls, tool_runs = model.calls, runs["get_details_by_id"]
    assert (model_calls, tool_runs) == (4, 1)  # the guard stopped the loop

    record = RecordStore(any_store).get(execution_id)
    assert record is not None
    assert record.header.replayable
    assert record.header.replayableReason is None
    assert verify_record_integrity(record).ok
    kinds = [e.kind for e in record.events]
    assert [e.seq for e in record.events] == list(range(1, len(kinds) + 1))
    assert kinds.count("model_start") == kinds.count("model_end") == 4
    assert kinds.count("tool_start") == kinds.count("tool_end") == 1
    decisions = [e.model_dump() for e in record.events if e.kind == "guard_decision"]
    assert [(d["verdict"], d["reason"]) for d in decisions] == [
        ("deny", "duplicate"),
        ("deny", "duplicate"),
        ("abort", "repeat_limit"),
    ]
    assert record.finalResponse is not None
    assert record.finalResponse.metadata["modelCalls"] == 4
    assert record.finalResponse.metadata["threadId"] == config["configurable"]["thread_id"]

    replayed = graph.replay(execution_id)
    assert replayed == output  # the same messages, ids included
    # the same request (new message objects, another thread) is accepted ...
    again = graph.replay(execution_id, ask(), {"configurable": {"thread_id": "elsewhere"}})
    assert again == output
    # ... another request is not
    with pytest.raises(ReplayHashMismatchError):
        graph.replay(execution_id, ask("Show me plan P1003."))
    result = graph.replay_result(execution_id)
    assert result.fromReplay
    assert result.originalExecutionId == execution_id
    assert result.originalTimestamp == record.header.createdUtcIso
    assert (model.calls, runs["get_details_by_id"]) == (model_calls, tool_runs)


@pytest.mark.parametrize("builder", BUILDERS, ids=["custom_graph", "create_agent"])
def test_async_recorded_run(builder: Any, tmp_path: Path) -> None:
    from langgraph.store.sqlite import SqliteStore

    runs = ToolRuns()
    model = ScriptedChatModel.looping("get_details_by_id", ARGS, times=2, final="Premium.")
    with SqliteStore.from_conn_string(str(tmp_path / "r.db")) as store:
        store.setup()
        guard = ReplayGuard(POLICY, store=store, record=True)
        graph = guard.record(builder(guard, model, make_tools(runs)))
        output = asyncio.run(graph.ainvoke(ask()))
        assert graph.last_execution_id is not None
        record = guard.records.get(graph.last_execution_id)  # type: ignore[union-attr]
        assert record is not None
        assert record.header.replayable
        assert [e.kind for e in record.events].count("guard_decision") == 1
        calls = model.calls
        assert graph.replay(graph.last_execution_id) == output
        assert model.calls == calls


def test_run_id_is_the_execution_id() -> None:
    guard = ReplayGuard(POLICY, store=InMemoryStore(), record=True)
    model = ScriptedChatModel(script=["Hello."])
    graph = guard.record(build_agent(guard, model, make_tools(ToolRuns())))
    run_id = uuid.uuid4()
    graph.invoke(ask(), {"run_id": run_id})
    assert graph.last_execution_id == str(run_id)
    assert guard.records is not None
    assert guard.records.get(str(run_id)) is not None


def test_an_error_run_replays_as_an_error() -> None:
    config = POLICY.model_copy(update={"exit_behavior": "error"})
    guard = ReplayGuard(config, store=InMemoryStore(), record=True)
    model = ScriptedChatModel.looping("get_details_by_id", ARGS, times=8)
    graph = guard.record(build_agent(guard, model, make_tools(ToolRuns())))
    with pytest.raises(LoopAbortedError):
        graph.invoke(ask())
    execution_id = graph.last_execution_id
    assert execution_id is not None
    assert guard.records is not None
    record = guard.records.get(execution_id)
    assert record is not None
    assert record.header.replayable  # the error IS the recorded response
    assert record.finalResponse is not None
    assert record.finalResponse.error is not None
    assert record.finalResponse.error.type == "LoopAbortedError"
    assert record.finalResponse.error.details["tool"] == "get_details_by_id"
    calls = model.calls
    with pytest.raises(ReplayedRunError) as info:
        graph.replay(execution_id)
    assert info.value.error.type == "LoopAbortedError"
    assert "get_details_by_id" in str(info.value)
    assert model.calls == calls


def test_an_interrupted_run_is_execution_incomplete() -> None:
    @tool
    def approve_refund(amount: int) -> str:
        """Refund after a human approves."""
        answer = interrupt({"question": f"Refund {amount}?"})
        return f"Refund {amount}: {answer}"

    guard = ReplayGuard(store=InMemoryStore(), record=True)
    model = ScriptedChatModel(script=[[("approve_refund", {"amount": 40})]], final="Refunded.")
    graph = guard.record(
        agent_graph(model, [approve_refund], guard=guard, checkpointer=InMemorySaver())
    )
    config = {"configurable": {"thread_id": "refund-1"}}
    paused = graph.invoke(ask("Refund me."), config)
    assert "__interrupt__" in paused
    assert guard.records is not None
    first = guard.records.get(str(graph.last_execution_id))
    assert first is not None
    assert first.header.replayableReason == "execution_incomplete"
    with pytest.raises(NotReplayableError) as info:
        ReplayEngine(first).replay()
    assert info.value.reason == "execution_incomplete"
    forced = graph.replay(first.execution_id, force=True)
    assert forced["__interrupt__"] == paused["__interrupt__"]

    done = graph.invoke(Command(resume="approved"), config)
    second = guard.records.get(str(graph.last_execution_id))
    assert second is not None
    assert second.header.replayable
    assert second.envelope["input"] == {
        "$command": {"graph": None, "update": None, "resume": "approved", "goto": []}
    }
    assert graph.replay(second.execution_id) == done


class Opaque:
    """A value with no JSON form."""


class OpaqueState(TypedDict):
    answer: str
    handle: Any


def test_unrecordable_output_is_recording_failure(caplog: pytest.LogCaptureFixture) -> None:
    def node(state: OpaqueState) -> dict[str, Any]:
        return {"answer": "42", "handle": Opaque()}

    builder = StateGraph(OpaqueState)
    builder.add_node("node", node)
    builder.add_edge(START, "node")
    builder.add_edge("node", END)
    guard = ReplayGuard(store=InMemoryStore(), record=True)
    graph = guard.record(builder.compile())
    with caplog.at_level(logging.WARNING, logger="langgraph_replay_guard"):
        output = graph.invoke({"answer": "", "handle": None})
    assert output["answer"] == "42"  # the user's run is untouched
    assert isinstance(output["handle"], Opaque)
    assert guard.records is not None
    record = guard.records.get(str(graph.last_execution_id))
    assert record is not None
    assert record.header.replayableReason == "recording_failure"
    assert record.finalResponse is not None
    problems = record.finalResponse.metadata["recordingProblems"]
    assert "output.handle" in problems[0]
    assert "Opaque" in caplog.text
    with pytest.raises(NotReplayableError) as info:
        ReplayEngine(record).replay()
    assert info.value.reason == "recording_failure"


class FailingStore(InMemoryStore):
    """A real in-memory store whose n-th writes fail (a database that is locked or gone)."""

    def __init__(self, fail_writes: set[int]) -> None:
        super().__init__()
        self.fail_writes = fail_writes
        self.writes = 0
        self._lock = threading.Lock()

    def batch(self, ops: Any) -> Any:
        ops = list(ops)
        if any(type(op).__name__ == "PutOp" for op in ops):
            with self._lock:
                self.writes += 1
                if self.writes in self.fail_writes:
                    msg = "database is locked"
                    raise OSError(msg)
        return super().batch(ops)


def test_recording_failures_never_break_the_run(caplog: pytest.LogCaptureFixture) -> None:
    # the started record cannot be written: the final one says recording_failure
    store = FailingStore(fail_writes={1})
    guard = ReplayGuard(store=store, record=True)
    model = ScriptedChatModel(script=["Hello."])
    graph = guard.record(build_agent(guard, model, make_tools(ToolRuns())))
    with caplog.at_level(logging.WARNING, logger="langgraph_replay_guard"):
        output = graph.invoke(ask())
    assert output["messages"][-1].content == "Hello."
    assert guard.records is not None
    record = guard.records.get(str(graph.last_execution_id))
    assert record is not None
    assert record.header.replayableReason == "recording_failure"
    assert record.finalResponse is not None
    assert "database is locked" in record.finalResponse.metadata["recordingProblems"][0]

    # the final record cannot be written: the started one stays execution_incomplete
    store.fail_writes = {store.writes + 2}
    output = graph.invoke(ask("Again."))
    assert output["messages"][-1].content == "Done."
    record = guard.records.get(str(graph.last_execution_id))
    assert record is not None
    assert record.header.replayableReason == "execution_incomplete"
    assert "could not write the final record" in caplog.text


def test_record_is_opt_in_and_needs_a_store() -> None:
    graph = build_agent(ReplayGuard(POLICY), ScriptedChatModel(), make_tools(ToolRuns()))
    with pytest.raises(ValueError, match="Recording is off"):
        ReplayGuard(POLICY).record(graph)
    with pytest.raises(ValueError, match="needs a store"):
        ReplayGuard(POLICY, record=True)
    records_store = InMemoryStore()
    separate = ReplayGuard(POLICY, store=InMemoryStore(), record=records_store)
    assert separate.records is not None
    assert separate.records.store is records_store


def test_middleware_record_option() -> None:
    from langchain.agents import create_agent

    store = InMemoryStore()
    middleware = ReplayGuardMiddleware(POLICY, store=store, record=True)
    model = ScriptedChatModel.looping("get_details_by_id", ARGS, times=3)
    agent = middleware.guard.record(
        create_agent(model, make_tools(ToolRuns()), middleware=[middleware])
    )
    output = agent.invoke(ask())
    record = RecordStore(store).get(str(agent.last_execution_id))
    assert record is not None
    assert record.header.replayable
    assert [e.kind for e in record.events].count("guard_decision") == 2
    assert agent.replay(record.execution_id) == output
    assert ReplayGuard(POLICY, store=store, record=True).middleware().guard.records is not None


def test_sigkill_mid_run_leaves_execution_incomplete(tmp_path: Path) -> None:
    from langgraph.store.sqlite import SqliteStore

    db = tmp_path / "records.db"
    ready = tmp_path / "ready"
    execution_id = str(uuid.uuid4())
    proc = warm_children.popen(
        [sys.executable, str(PROC_SCRIPT), str(db), str(ready), execution_id],
        cwd=REPO_ROOT,
        env={**os.environ, "LANGSMITH_TRACING": "false"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            if proc.poll() is not None:
                _, err = proc.communicate()
                pytest.fail(f"the recorded process exited early: {err.decode()[-2000:]}")
            if time.monotonic() > deadline:
                pytest.fail("the recorded process never reached its tool")
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    with SqliteStore.from_conn_string(str(db)) as store:
        record = RecordStore(store).get(execution_id)
    assert record is not None
    assert record.header.replayable is False
    assert record.header.replayableReason == "execution_incomplete"
    assert record.finalResponse is None
    assert verify_record_integrity(record).ok
    for force in (False, True):
        with pytest.raises(NotReplayableError) as info:
            ReplayEngine(record).replay(force=force)
        assert info.value.reason == "execution_incomplete"


def test_envelope_and_json_forms() -> None:
    from langchain_core.messages import AIMessage
    from langgraph.types import Interrupt

    from langgraph_replay_guard.records.recording import (
        UnrecordableValueError,
        build_envelope,
        revive,
        to_json,
    )

    first = HumanMessage(content="hi", id="random-1")
    second = HumanMessage(content="hi", id="random-2")
    config_a = {"configurable": {"thread_id": "a", "model": "small"}, "tags": ["x"]}
    config_b = {"configurable": {"thread_id": "b", "model": "small"}, "run_id": uuid.uuid4()}
    env_a = build_envelope("g", {"messages": [first]}, config_a)  # type: ignore[arg-type]
    env_b = build_envelope("g", {"messages": [second]}, config_b)  # type: ignore[arg-type]
    assert env_a == env_b
    assert env_a["config"] == {"configurable": {"model": "small"}}
    other_model = {"configurable": {"model": "large"}}
    assert build_envelope("g", {"messages": [first]}, other_model) != env_a  # type: ignore[arg-type]
    with_client = {"configurable": {"client": Opaque(), "model": "small"}}
    env_c = build_envelope("g", {"messages": [first]}, with_client)  # type: ignore[arg-type]
    assert env_c["config"]["unhashed_configurable"] == ["client"]

    value = {
        "messages": [first, AIMessage(content="", tool_calls=[], id="ai-1")],
        "__interrupt__": [Interrupt(value={"q": 1}, id="i-1")],
        "plain": (1, 2.5, None),
    }
    assert revive(to_json(value)) == {**value, "plain": [1, 2.5, None]}
    with pytest.raises(UnrecordableValueError, match=r"output\.state\[1\]"):
        to_json({"state": [1, Opaque()]}, path="output")
