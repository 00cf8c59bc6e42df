"""Replay safety against tool errors, edited history and long threads (issue 12, parts 2-4)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolRuntime
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import (
    GuardConfig,
    ReplayConflictError,
    ReplayGuard,
    ReplayUnsafeError,
)
from langgraph_replay_guard.testing import ScriptedChatModel

from .replay_graphs import replay_graph
from .test_replay import SideEffects, make_tools

pytestmark = pytest.mark.filterwarnings(
    "ignore:langgraph-replay-guard.*durable checkpointer:langgraph_replay_guard.ReplayGuardWarning"
)

EMAIL = ("send_email", {"to": "ann@example.com"})
CHARGE = ("charge_card", {"amount": 20})
POLICY: dict[str, Any] = {
    "send_email": "unsafe",
    "charge_card": {"replay": "idempotent", "idempotency_key_arg": "idempotency_key"},
}


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


def _retry_after_error(call: tuple[str, dict[str, Any]]) -> Any:
    """A model step: ask for `call`; after an error answer, ask for the identical call again."""

    def step(messages: list[BaseMessage]) -> Any:
        last = messages[-1]
        if isinstance(last, HumanMessage):
            return [call]
        if isinstance(last, ToolMessage) and last.status == "error":
            return [call]
        return "All done."

    return step


@pytest.mark.parametrize("handle_tool_errors", [True, "Tool failed, try again."])
def test_an_unsafe_tool_that_raised_is_not_resent_when_the_node_turned_it_into_a_message(
    handle_tool_errors,
):
    fx = SideEffects()
    fx.fail_next["send_email"] = 1  # the email goes out, then the connection drops
    model = ScriptedChatModel(script=[_retry_after_error(EMAIL)] * 5)
    graph = replay_graph(
        ReplayGuard(GuardConfig(tools=POLICY), store=InMemoryStore()),
        model,
        make_tools(fx),
        handle_tool_errors=handle_tool_errors,
        checkpointer=InMemorySaver(),
    )
    with pytest.raises(ReplayUnsafeError) as caught:
        graph.invoke({"messages": [HumanMessage("email Ann")]}, _config(), durability="sync")
    assert fx.count("send_email") == 1  # the model's retry did not send it again
    assert caught.value.facts["reason"] == "an identical call's outcome is unknown"
    assert "ConnectionError" in caught.value.facts["last_error"]


def test_an_idempotent_tool_that_raised_is_retried_with_the_same_key():
    fx = SideEffects()
    fx.fail_next["charge_card"] = 1
    model = ScriptedChatModel(script=[_retry_after_error(CHARGE)] * 5)
    graph = replay_graph(
        ReplayGuard(GuardConfig(tools=POLICY), store=InMemoryStore()),
        model,
        make_tools(fx),
        handle_tool_errors=True,
        checkpointer=InMemorySaver(),
    )
    result = graph.invoke({"messages": [HumanMessage("charge")]}, _config(), durability="sync")
    assert result["messages"][-1].content == "All done."
    keys = [key for key, _ in fx.details("charge_card")]
    assert len(keys) == 2
    assert keys[0] == keys[1]  # the payment API deduplicates the retry


def test_a_policy_can_name_errors_raised_before_any_effect():
    sent: list[str] = []
    attempts: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email; rejects a bad address before sending."""
        attempts.append(to)
        if len(attempts) == 1:
            msg = "mail server refused the address (nothing sent)"
            raise LookupError(msg)
        sent.append(to)
        return f"Email sent to {to}"

    policy = {"send_email": {"replay": "unsafe", "no_effect_errors": ["LookupError"]}}
    model = ScriptedChatModel(script=[_retry_after_error(EMAIL)] * 5)
    graph = replay_graph(
        ReplayGuard(GuardConfig(tools=policy), store=InMemoryStore()),
        model,
        [send_email],
        handle_tool_errors=True,
        checkpointer=InMemorySaver(),
    )
    result = graph.invoke({"messages": [HumanMessage("email")]}, _config(), durability="sync")
    assert result["messages"][-1].content == "All done."
    assert len(attempts) == 2
    assert sent == ["ann@example.com"]


def test_create_agent_with_tool_retry_middleware_never_resends_an_unsafe_call():
    from langchain.agents import create_agent
    from langchain.agents.middleware import ToolRetryMiddleware

    fx = SideEffects()
    fx.fail_next["send_email"] = 1
    guard = ReplayGuard(GuardConfig(tools=POLICY), store=InMemoryStore())
    agent = create_agent(
        ScriptedChatModel(script=[[EMAIL]]),
        make_tools(fx),
        middleware=[
            ToolRetryMiddleware(max_retries=3, initial_delay=0.0, jitter=False),
            guard.middleware(),
        ],
        checkpointer=InMemorySaver(),
    )
    # The retry re-enters the guard, which refuses the unknown outcome; the refusal passes
    # the retry middleware (a control-flow signal) and reaches the operator, never the model.
    with pytest.raises(ReplayUnsafeError, match="outcome is unknown"):
        agent.invoke({"messages": [HumanMessage("email Ann")]}, _config())
    assert fx.count("send_email") == 1


def test_time_travel_that_edits_the_tool_is_a_conflict_not_a_replay():
    done: list[str] = []

    @tool
    def delete_file(path: str) -> str:
        """Delete a file."""
        done.append(f"delete {path}")
        return f"deleted {path}"

    @tool
    def archive_file(path: str) -> str:
        """Archive a file."""
        done.append(f"archive {path}")
        return f"archived {path}"

    policy = {"delete_file": "unsafe", "archive_file": "unsafe"}
    model = ScriptedChatModel(script=[[("delete_file", {"path": "a.txt"})], "ok", "ok", "ok"])
    graph = replay_graph(
        ReplayGuard(GuardConfig(tools=policy), store=InMemoryStore()),
        model,
        [delete_file, archive_file],
        checkpointer=InMemorySaver(),
    )
    config = _config()
    graph.invoke({"messages": [HumanMessage("clean up")]}, config, durability="sync")
    assert done == ["delete a.txt"]
    # Go back to the checkpoint before the tools ran and edit the call to another tool,
    # keeping the message id, the tool_call_id and the arguments (as a Studio edit does).
    before_tools = next(s for s in graph.get_state_history(config) if s.next == ("tools",))
    asked = before_tools.values["messages"][-1]
    assert isinstance(asked, AIMessage)
    edited = asked.model_copy(
        update={"tool_calls": [{**asked.tool_calls[0], "name": "archive_file"}]}
    )
    fork = graph.update_state(before_tools.config, {"messages": [edited]})
    with pytest.raises(ReplayConflictError, match="another tool"):
        graph.invoke(None, fork, durability="sync")
    assert done == ["delete a.txt"]  # neither run, nor answered with delete's result


def test_an_unknown_outcome_behind_many_identical_completed_calls_is_found():
    sent: list[int] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(len(sent))
        if len(sent) == 61:
            msg = "connection reset after the request was sent"
            raise ConnectionError(msg)
        return f"Email sent to {to}"

    model = ScriptedChatModel(script=[_retry_after_error(EMAIL)] * 200)
    graph = replay_graph(
        ReplayGuard(GuardConfig(tools=POLICY), store=InMemoryStore()),
        model,
        [send_email],
        handle_tool_errors=True,
        checkpointer=InMemorySaver(),
    )
    config = _config()
    for turn in range(60):  # 60 identical sends, each answered, one per user turn
        graph.invoke({"messages": [HumanMessage(f"send it again ({turn})")]}, config)
    assert len(sent) == 60
    with pytest.raises(ReplayUnsafeError):
        graph.invoke({"messages": [HumanMessage("once more")]}, config, durability="sync")
    assert len(sent) == 61  # the send that failed was not repeated by the model's retry


class KeyedOnlyStore(InMemoryStore):
    """A store that refuses searches: the ledger must find every row by its key."""

    def search(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the ledger searched the store")

    async def asearch(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the ledger searched the store")


def test_every_ledger_lookup_is_keyed():
    fx = SideEffects()
    fx.fail_next["send_email"] = 1
    store = KeyedOnlyStore()
    guard = ReplayGuard(GuardConfig(tools=POLICY), store=store)
    calls = [EMAIL, CHARGE, ("lookup", {"id": "P1"})]
    model = ScriptedChatModel(script=[calls, "done", "done"])
    graph = replay_graph(guard, model, make_tools(fx), checkpointer=InMemorySaver())
    config = _config()
    with pytest.raises(ConnectionError):  # the email went out, then the connection dropped
        graph.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    with pytest.raises(ReplayUnsafeError) as caught:
        graph.invoke(None, config, durability="sync")
    result = guard.resolve(graph, config, caught.value.facts["tool_call_id"], "succeeded")
    assert fx.count("send_email") == 1
    assert fx.count("charge_card") == 1
    assert result["messages"][-1].content in ("done", "All done.")


def test_a_runtime_idempotency_key_reaches_a_tool_without_a_key_argument():
    seen: list[str] = []

    @tool
    def refund(order: str, runtime: ToolRuntime) -> str:
        """Refund an order (idempotent by the key in the runtime config)."""
        seen.append(runtime.config["configurable"]["replay_guard_idempotency_key"])
        return f"refunded {order}"

    graph = replay_graph(
        ReplayGuard(GuardConfig(tools={"refund": "idempotent"}), store=InMemoryStore()),
        ScriptedChatModel(script=[[("refund", {"order": "o1"})]]),
        [refund],
        checkpointer=InMemorySaver(),
    )
    graph.invoke({"messages": [HumanMessage("refund")]}, _config(), durability="sync")
    assert len(seen) == 1
    assert seen[0].startswith("rg-")


def test_a_fork_from_before_the_model_call_is_told_it_is_a_fork_or_time_travel():
    # The thread sent the email; the user goes back to the checkpoint before the model
    # call (time travel) and runs from there: the model asks for the same send with new
    # ids. The ledger cannot tell this fork from a lost message; the error names the fork.
    sent: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    model = ScriptedChatModel(
        script=[[("send_email", {"to": "bob"})], "ok", [("send_email", {"to": "bob"})], "ok"]
    )
    graph = replay_graph(
        ReplayGuard(GuardConfig(tools={"send_email": "unsafe"}), store=InMemoryStore()),
        model,
        [send_email],
        checkpointer=InMemorySaver(),
    )
    config = _config()
    graph.invoke({"messages": [HumanMessage("email bob")]}, config, durability="sync")
    assert sent == ["bob"]
    before_model = [s for s in graph.get_state_history(config) if s.next == ("agent",)][-1]
    with pytest.raises(ReplayUnsafeError, match="a fork or time travel from a checkpoint"):
        graph.invoke(None, before_model.config, durability="sync")
    assert sent == ["bob"]
