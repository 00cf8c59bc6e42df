"""Replay safety on resume: the ledger answers re-run tool calls from their recorded outcome."""

from __future__ import annotations

import asyncio
import threading
import uuid
import warnings
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolRuntime
from langgraph.store.memory import InMemoryStore
from langgraph.types import Command, RetryPolicy, interrupt

from langgraph_replay_guard import (
    GuardConfig,
    ReplayConflictError,
    ReplayGuard,
    ReplayGuardWarning,
    ReplayUnsafeError,
)
from langgraph_replay_guard.replay.ledger import LedgerEntry
from langgraph_replay_guard.storage.ledger_io import ReplayLedger

from .replay_graphs import REPLAY_POLICY, asking_model, replay_graph

# These tests use InMemorySaver on purpose; the warning about it is tested on its own below.
pytestmark = pytest.mark.filterwarnings(
    "ignore:langgraph-replay-guard.*durable checkpointer:langgraph_replay_guard.ReplayGuardWarning"
)


class SideEffects:
    """What really happened outside the graph: one entry per tool body that did its effect."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []
        self.fail_next: dict[str, int] = {}
        self._lock = threading.Lock()

    def did(self, name: str, detail: Any = None) -> None:
        with self._lock:
            self.log.append((name, detail))

    def count(self, name: str) -> int:
        return sum(1 for entry in self.log if entry[0] == name)

    def details(self, name: str) -> list[Any]:
        return [detail for entry_name, detail in self.log if entry_name == name]

    def maybe_fail(self, name: str) -> None:
        with self._lock:
            left = self.fail_next.get(name, 0)
            if left:
                self.fail_next[name] = left - 1
                msg = f"{name}: connection reset after the request was sent"
                raise ConnectionError(msg)


def make_tools(fx: SideEffects) -> list[Any]:
    @tool
    def send_email(to: str) -> str:
        """Send an email (unsafe: cannot be deduplicated upstream)."""
        fx.did("send_email", to)
        fx.maybe_fail("send_email")
        return f"Email sent to {to}"

    @tool
    def charge_card(amount: int, idempotency_key: str, runtime: ToolRuntime) -> str:
        """Charge a card (idempotent: the payment API deduplicates by key)."""
        from_config = runtime.config["configurable"].get("replay_guard_idempotency_key")
        fx.did("charge_card", (idempotency_key, from_config))
        fx.maybe_fail("charge_card")
        return f"Charged {amount}"

    @tool
    def lookup(id: str) -> str:
        """Read a record (pure)."""
        fx.did("lookup", id)
        fx.maybe_fail("lookup")
        return f"record {id}"

    @tool
    def approve_and_send(to: str) -> str:
        """Ask a human for approval, then send (unsafe)."""
        answer = interrupt({"approve": to})
        if answer != "yes":
            return "Not approved"
        fx.did("approve_and_send", to)
        return f"Sent to {to} after approval"

    return [send_email, charge_card, lookup, approve_and_send]


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


def _guard(store: Any = None, **config: Any) -> ReplayGuard:
    return ReplayGuard(GuardConfig(tools=REPLAY_POLICY, **config), store=store)


def _tool_messages(state: Any) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


BATCH = [
    ("send_email", {"to": "ann@example.com"}),
    ("charge_card", {"amount": 20}),
    ("lookup", {"id": "P1"}),
]


@pytest.fixture
def fx() -> SideEffects:
    return SideEffects()


def test_retry_policy_never_resends_an_unsafe_call_whose_outcome_is_unknown(fx):
    fx.fail_next["send_email"] = 1  # the email goes out, then the connection drops
    graph = replay_graph(
        _guard(InMemoryStore()),
        asking_model([BATCH[0]]),
        make_tools(fx),
        retry=RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=ConnectionError),
        checkpointer=InMemorySaver(),
    )
    config = _config()
    with pytest.raises(ReplayUnsafeError) as caught:
        graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
    assert fx.count("send_email") == 1  # the retry did not send it again
    facts = caught.value.facts
    assert facts["tool"] == "send_email"
    assert facts["args"] == {"to": "ann@example.com"}
    assert facts["thread_id"] == config["configurable"]["thread_id"]
    assert facts["started_at"]
    assert "ConnectionError" in (facts["last_error"] or "")
    assert "guard.resolve" in str(caught.value)


def _unknown_email(fx: SideEffects, store: Any) -> tuple[ReplayGuard, Any, dict[str, Any], str]:
    """A thread stopped on an email whose outcome is unknown: sent, then the connection dropped.

    Returns the guard, the graph, the thread's config and the email's tool_call_id.
    """
    fx.fail_next["send_email"] = 1
    guard = _guard(store)
    graph = replay_graph(
        guard,
        asking_model([BATCH[0]]),
        make_tools(fx),
        retry=RetryPolicy(max_attempts=2, initial_interval=0.01, retry_on=ConnectionError),
        checkpointer=InMemorySaver(),
    )
    config = _config()
    with pytest.raises(ReplayUnsafeError) as caught:
        graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
    return guard, graph, config, caught.value.facts["tool_call_id"]


def test_a_human_resolves_an_unknown_outcome_and_the_model_gets_the_confirmed_result(fx):
    guard, graph, config, call_id = _unknown_email(fx, InMemoryStore())

    result = guard.resolve(
        graph, config, call_id, "succeeded", result="Email sent (checked)", durability="sync"
    )

    assert fx.count("send_email") == 1
    answer = _tool_messages(result)[-1]
    assert answer.tool_call_id == call_id
    assert answer.content == "Email sent (checked)"
    assert answer.status == "success"
    assert result["messages"][-1].content == "All done."
    with pytest.raises(ValueError, match="already has a known outcome"):
        guard.resolve(graph, config, call_id, "retry")


def test_resolve_finds_rows_written_before_lookup_rows_existed(fx):
    store = InMemoryStore()
    guard, graph, config, call_id = _unknown_email(fx, store)
    # An older release wrote no lookup rows: drop them, the row itself stays.
    ledger = ReplayLedger(store, namespace=guard.namespace)
    thread = config["configurable"]["thread_id"]
    for item in store.search(ledger.index(thread), limit=100):
        store.delete(ledger.index(thread), item.key)
    assert store.search(ledger.index(thread)) == []
    assert [row.tool_call_id for row in ledger.by_tool_call_id(thread, call_id)] == [call_id]
    found = asyncio.run(ledger.aby_tool_call_id(thread, call_id))
    assert [row.tool_call_id for row in found] == [call_id]

    result = guard.resolve(graph, config, call_id, "succeeded", result="Sent (checked)")

    assert fx.count("send_email") == 1
    assert _tool_messages(result)[-1].content == "Sent (checked)"


def test_resolving_with_retry_runs_the_tool_exactly_once_more(fx):
    guard, graph, config, call_id = _unknown_email(fx, InMemoryStore())
    result = guard.resolve(graph, config, call_id, "retry", durability="sync")
    assert fx.count("send_email") == 2  # the operator checked: the first never arrived
    assert _tool_messages(result)[-1].content == "Email sent to ann@example.com"


def test_retry_policy_retries_idempotent_calls_with_the_same_key_and_reruns_pure_ones(fx):
    fx.fail_next["charge_card"] = 2
    fx.fail_next["lookup"] = 1
    graph = replay_graph(
        _guard(InMemoryStore()),
        asking_model(BATCH[1:]),
        make_tools(fx),
        retry=RetryPolicy(max_attempts=4, initial_interval=0.01, retry_on=ConnectionError),
        checkpointer=InMemorySaver(),
    )
    result = graph.invoke({"messages": [HumanMessage("pay")]}, _config(), durability="sync")
    charges = fx.details("charge_card")
    assert len(charges) == 3
    keys = {arg for arg, _ in charges}
    assert len(keys) == 1  # every attempt used the same idempotency key
    assert all(arg == from_config for arg, from_config in charges)  # arg and runtime agree
    assert next(iter(keys)).startswith("rg-")
    assert fx.count("lookup") >= 2  # a pure call may run again
    assert result["messages"][-1].content == "All done."


def test_interrupt_resume_replays_a_sibling_that_already_ran(fx):
    # A plain ToolNode runs a batch in one task: when one call interrupts, LangGraph re-runs
    # the whole node on resume, so the email sent by its sibling would go out twice.
    store = InMemoryStore()
    calls = [("send_email", {"to": "bob@example.com"}), ("approve_and_send", {"to": "cy@x.org"})]
    graph = replay_graph(
        _guard(store), asking_model(calls), make_tools(fx), checkpointer=InMemorySaver()
    )
    config = _config()
    first = graph.invoke({"messages": [HumanMessage("send both")]}, config, durability="sync")
    assert "__interrupt__" in first
    assert fx.count("send_email") == 1

    result = graph.invoke(Command(resume="yes"), config, durability="sync")

    assert fx.count("send_email") == 1  # replayed from the ledger, not sent again
    assert fx.count("approve_and_send") == 1
    answers = {m.name: m for m in _tool_messages(result)}
    assert answers["send_email"].content == "Email sent to bob@example.com"
    assert answers["send_email"].response_metadata.get("replay_guard") == "replayed"
    assert answers["approve_and_send"].content == "Sent to cy@x.org after approval"


def test_unguarded_baseline_sends_the_sibling_twice_on_interrupt_resume(fx):
    # The problem the ledger solves, measured on the same graph without a store.
    calls = [("send_email", {"to": "bob@example.com"}), ("approve_and_send", {"to": "cy@x.org"})]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ReplayGuardWarning)
        graph = replay_graph(
            _guard(), asking_model(calls), make_tools(fx), checkpointer=InMemorySaver()
        )
        config = _config()
        graph.invoke({"messages": [HumanMessage("send both")]}, config)
        graph.invoke(Command(resume="yes"), config)
    assert fx.count("send_email") == 2


def test_lost_model_output_does_not_resend(fx):
    # The model's message was never checkpointed (a crash): the model runs again and asks
    # for the same email with new ids. A fork from before the model call is the same thing.
    store = InMemoryStore()
    guard = _guard(store)
    graph = replay_graph(
        guard, asking_model([BATCH[0]]), make_tools(fx), checkpointer=InMemorySaver()
    )
    config = _config()
    graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
    assert fx.count("send_email") == 1
    before_model = [  # the oldest: the user's message in, the model not yet run
        s for s in graph.get_state_history(config) if s.next == ("agent",) and s.values["messages"]
    ][-1]
    assert len(before_model.values["messages"]) == 1
    with pytest.raises(ReplayUnsafeError, match="lost") as caught:
        graph.invoke(None, before_model.config, durability="sync")
    assert fx.count("send_email") == 1
    facts = caught.value.facts
    assert facts["earlier_tool_call_id"] != facts["tool_call_id"]
    # The operator says the earlier email is the one the user wanted: answer the new call.
    fork = {"configurable": {"thread_id": config["configurable"]["thread_id"]}}
    result = guard.resolve(
        graph, fork, facts["tool_call_id"], "succeeded", result="sent once", durability="sync"
    )
    assert fx.count("send_email") == 1
    assert _tool_messages(result)[-1].content == "sent once"


def test_a_deliberate_repeat_in_a_new_turn_is_not_blocked(fx):
    store = InMemoryStore()
    graph = replay_graph(
        _guard(store), asking_model([BATCH[0]]), make_tools(fx), checkpointer=InMemorySaver()
    )
    config = _config()
    graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
    graph.invoke({"messages": [HumanMessage("send it again")]}, config, durability="sync")
    assert fx.count("send_email") == 2


def test_same_identity_with_other_arguments_is_a_conflict(fx):
    store = InMemoryStore()
    graph = replay_graph(
        _guard(store), asking_model([BATCH[0]]), make_tools(fx), checkpointer=InMemorySaver()
    )
    config = _config()
    graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
    asked = next(
        s for s in graph.get_state_history(config) if s.next == ("tools",)
    )  # the checkpoint right after the model asked
    ai = asked.values["messages"][-1]
    edited = ai.model_copy(
        update={"tool_calls": [{**ai.tool_calls[0], "args": {"to": "mallory@example.com"}}]}
    )
    fork = graph.update_state(asked.config, {"messages": [edited]}, as_node="agent")
    with pytest.raises(ReplayConflictError, match="other arguments"):
        graph.invoke(None, fork, durability="sync")
    assert fx.count("send_email") == 1


def test_on_unsafe_interrupt_asks_a_human_and_resolve_answers_it(fx):
    fx.fail_next["send_email"] = 1
    store = InMemoryStore()
    guard = _guard(store, on_unsafe="interrupt")
    graph = replay_graph(
        guard,
        asking_model([BATCH[0]]),
        make_tools(fx),
        retry=RetryPolicy(max_attempts=2, initial_interval=0.01, retry_on=ConnectionError),
        checkpointer=InMemorySaver(),
    )
    config = _config()
    first = graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
    (pending,) = first["__interrupt__"]
    assert pending.value["tool"] == "send_email"
    assert pending.value["kind"] == "replay_guard.unknown_outcome"
    result = guard.resolve(
        graph, config, pending.value["tool_call_id"], "failed", "bounced", durability="sync"
    )
    assert fx.count("send_email") == 1
    answer = _tool_messages(result)[-1]
    assert answer.status == "error"
    assert answer.content == "bounced"


def test_on_unsafe_interrupt_can_be_answered_with_a_plain_resume_value(fx):
    # What a Studio user does: resume the interrupt with {"outcome": ..., "result": ...}.
    fx.fail_next["send_email"] = 1
    graph = replay_graph(
        _guard(InMemoryStore(), on_unsafe="interrupt"),
        asking_model([BATCH[0]]),
        make_tools(fx),
        retry=RetryPolicy(max_attempts=2, initial_interval=0.01, retry_on=ConnectionError),
        checkpointer=InMemorySaver(),
    )
    config = _config()
    graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
    result = graph.invoke(
        Command(resume={"outcome": "succeeded", "result": "delivered"}), config, durability="sync"
    )
    assert fx.count("send_email") == 1
    assert _tool_messages(result)[-1].content == "delivered"


def test_threads_and_tenants_never_see_each_other_rows(fx):
    store = InMemoryStore()
    acme = ReplayGuard(GuardConfig(tools=REPLAY_POLICY), store=store, namespace=("rg", "acme"))
    umbrella = ReplayGuard(
        GuardConfig(tools=REPLAY_POLICY), store=store, namespace=("rg", "umbrella")
    )
    config = {"configurable": {"thread_id": "shared.thread.id"}}  # dots need escaping
    for guard in (acme, umbrella):
        graph = replay_graph(
            guard, asking_model([BATCH[0]]), make_tools(fx), checkpointer=InMemorySaver()
        )
        graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
    assert fx.count("send_email") == 2  # each tenant's own call, neither replayed the other's
    acme_rows = ReplayLedger(store, namespace=("rg", "acme")).rows("shared.thread.id")
    umbrella_rows = ReplayLedger(store, namespace=("rg", "umbrella")).rows("shared.thread.id")
    assert len(acme_rows) == len(umbrella_rows) == 1
    assert acme_rows[0].tool_call_id != umbrella_rows[0].tool_call_id
    assert ReplayLedger(store, namespace=("rg", "acme")).rows("other-thread") == []


def test_ledger_rows_record_what_ran(fx):
    store = InMemoryStore()
    graph = replay_graph(
        _guard(store), asking_model(BATCH), make_tools(fx), checkpointer=InMemorySaver()
    )
    config = _config()
    graph.invoke({"messages": [HumanMessage("do all")]}, config, durability="sync")
    rows = {row.tool: row for row in ReplayLedger(store).rows(config["configurable"]["thread_id"])}
    assert {name: row.status for name, row in rows.items()} == {
        "send_email": "completed",
        "charge_card": "completed",
        "lookup": "completed",
    }
    assert rows["send_email"].result == {
        "codec": 2,
        "content": "Email sent to ann@example.com",
        "status": "success",
    }
    assert rows["charge_card"].idempotency_key == fx.details("charge_card")[0][0]
    assert rows["lookup"].args is None  # pure rows keep no arguments


def test_a_corrupt_row_is_an_unknown_outcome_for_unsafe_tools(fx):
    store = InMemoryStore()
    graph = replay_graph(
        _guard(store),
        asking_model([BATCH[0], BATCH[2]]),
        make_tools(fx),
        checkpointer=InMemorySaver(),
    )
    config = _config()
    graph.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    ledger = ReplayLedger(store)
    thread = config["configurable"]["thread_id"]
    for row in ledger.rows(thread):
        store.put(ledger.namespace(thread), row.key, {"garbage": True})
    asked = next(s for s in graph.get_state_history(config) if s.next == ("tools",))
    with pytest.raises(ReplayUnsafeError, match="unknown"):
        graph.invoke(None, asked.config, durability="sync")
    assert fx.count("send_email") == 1
    assert ledger.rows(thread)[0].status == "corrupt"


def test_unsafe_tools_without_a_store_warn_once(fx):
    graph = replay_graph(
        _guard(), asking_model([BATCH[0]]), make_tools(fx), checkpointer=InMemorySaver()
    )
    with pytest.warns(ReplayGuardWarning, match="no store for the replay ledger"):
        graph.invoke({"messages": [HumanMessage("email Ann")]}, _config())


def test_the_graph_store_serves_as_the_ledger(fx):
    store = InMemoryStore()
    calls = [("send_email", {"to": "bob@example.com"}), ("approve_and_send", {"to": "cy@x.org"})]
    graph = replay_graph(
        _guard(), asking_model(calls), make_tools(fx), checkpointer=InMemorySaver(), store=store
    )
    config = _config()
    graph.invoke({"messages": [HumanMessage("send both")]}, config, durability="sync")
    graph.invoke(Command(resume="yes"), config, durability="sync")
    assert fx.count("send_email") == 1
    assert ReplayLedger(store).rows(config["configurable"]["thread_id"])


def test_async_interrupt_resume_and_resolve(fx):
    async def main() -> None:
        store = InMemoryStore()
        guard = _guard(store)
        calls = [("send_email", {"to": "bob@example.com"}), ("approve_and_send", {"to": "c@x"})]
        graph = replay_graph(
            guard, asking_model(calls), make_tools(fx), checkpointer=InMemorySaver()
        )
        config = _config()
        await graph.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")
        await graph.ainvoke(Command(resume="yes"), config, durability="sync")
        assert fx.count("send_email") == 1

        fx.fail_next["send_email"] = 1
        graph2 = replay_graph(
            guard,
            asking_model([("send_email", {"to": "dan@example.com"})]),
            make_tools(fx),
            retry=RetryPolicy(max_attempts=2, initial_interval=0.01, retry_on=ConnectionError),
            checkpointer=InMemorySaver(),
        )
        config2 = _config()
        with pytest.raises(ReplayUnsafeError):
            await graph2.ainvoke({"messages": [HumanMessage("go")]}, config2, durability="sync")
        result = await guard.aresolve(
            graph2, config2, _pending_id(graph2, config2), "succeeded", "ok", durability="sync"
        )
        assert _tool_messages(result)[-1].content == "ok"
        assert fx.count("send_email") == 2  # bob once, dan once

    asyncio.run(main())


def _pending_id(graph: Any, config: dict[str, Any]) -> str:
    ai = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)][-1]
    return ai.tool_calls[0]["id"]


def test_create_agent_with_a_store_replays_after_interrupt(fx):
    from langchain.agents import create_agent

    store = InMemoryStore()
    guard = _guard()
    calls = [("send_email", {"to": "bob@example.com"}), ("approve_and_send", {"to": "cy@x.org"})]
    agent = create_agent(
        asking_model(calls),
        make_tools(fx),
        middleware=[guard.middleware()],
        checkpointer=InMemorySaver(),
        store=store,
    )
    config = _config()
    agent.invoke({"messages": [HumanMessage("send both")]}, config, durability="sync")
    result = agent.invoke(Command(resume="yes"), config, durability="sync")
    assert fx.count("send_email") == 1
    assert fx.count("approve_and_send") == 1
    assert result["messages"][-1].content == "All done."
    rows = ReplayLedger(store).rows(config["configurable"]["thread_id"])
    assert {row.tool: row.status for row in rows} == {
        "send_email": "completed",
        "approve_and_send": "completed",
    }


def test_ledger_entry_reads_old_or_foreign_rows_as_corrupt():
    assert LedgerEntry.from_value("k", {"v": 99, "status": "completed"}).status == "corrupt"
    assert LedgerEntry.from_value("k", {"v": 1, "status": "weird"}).status == "corrupt"
    assert LedgerEntry.from_value("k", ["not", "a", "row"]).outcome_unknown


def test_an_unanswered_earlier_call_stops_the_re_asked_unsafe_call(fx):
    # Under async durability LangGraph can lose a finished task's writes: the thread then holds
    # the model's tool calls with no answers, and the model, run again, asks for the same
    # email with new ids. The email went out; it must not go out again.
    store = InMemoryStore()
    graph = replay_graph(
        _guard(store), asking_model([BATCH[0]]), make_tools(fx), checkpointer=InMemorySaver()
    )
    config = _config()
    graph.invoke({"messages": [HumanMessage("email Ann")]}, config, durability="sync")
    asked = next(s for s in graph.get_state_history(config) if s.next == ("tools",))
    dangling = graph.update_state(asked.config, None, as_node="tools")  # answers lost
    assert not any(isinstance(m, ToolMessage) for m in graph.get_state(dangling).values["messages"])
    with pytest.raises(ReplayUnsafeError, match="not in the history this run continues") as caught:
        graph.invoke(None, dangling, durability="sync")
    assert fx.count("send_email") == 1
    assert (
        caught.value.facts["earlier_tool_call_id"]
        == asked.values["messages"][-1].tool_calls[0]["id"]
    )


def test_identical_unsafe_calls_in_one_batch_are_siblings_not_replays(fx):
    # The loop layers never deduplicate unsafe calls; the ledger must not call a sibling of
    # the same AIMessage "an earlier call" either.
    store = InMemoryStore()
    graph = replay_graph(
        _guard(store),
        asking_model([BATCH[0], BATCH[0]]),
        make_tools(fx),
        checkpointer=InMemorySaver(),
    )
    graph.invoke({"messages": [HumanMessage("email Ann twice")]}, _config(), durability="sync")
    assert fx.count("send_email") == 2


def _custom_handler(error: Exception) -> str:
    return f"tool failed: {error}"


@pytest.mark.parametrize("handle_tool_errors", [True, "it failed", _custom_handler])
def test_catch_all_tool_error_handling_still_stops_on_an_unknown_outcome(fx, handle_tool_errors):
    # Tool errors still reach the model as messages; an unknown outcome reaches the operator.
    store = InMemoryStore()
    fx.fail_next["lookup"] = 1
    graph = replay_graph(
        _guard(store),
        asking_model([BATCH[0], BATCH[2]]),
        make_tools(fx),
        handle_tool_errors=handle_tool_errors,
        checkpointer=InMemorySaver(),
    )
    config = _config()
    done = graph.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    lookup_answer = next(m for m in _tool_messages(done) if m.name == "lookup")
    assert lookup_answer.status == "error"  # an ordinary tool error: converted, run goes on
    asked = next(s for s in graph.get_state_history(config) if s.next == ("tools",))
    dangling = graph.update_state(asked.config, None, as_node="tools")
    with pytest.raises(ReplayUnsafeError):
        graph.invoke(None, dangling, durability="sync")
    assert fx.count("send_email") == 1
