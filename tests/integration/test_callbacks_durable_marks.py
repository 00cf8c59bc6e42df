"""Issue 27, items 1 and 2: the callback handler never loses an unknown outcome and fails closed.

1. An unknown-outcome mark must survive the eviction of its thread from the handler's thread
   table (1,000+ other threads through one handler).
2. With its store down, the handler refuses `unsafe` and `idempotent` calls (a clear error
   naming the tool and the store problem); a `pure` read runs with a warning.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
from langchain_core.tools import tool
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard import GuardConfig, ReplayGuardCallbackHandler
from langgraph_replay_guard.integrations.callbacks import ToolCallBlockedError
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.test_callbacks_unknown import (
    CONFIG,
    EMAIL,
    SEND,
    Mailbox,
    agent_for,
    cfg,
    tool_texts,
    user,
)

os.environ["LANGSMITH_TRACING"] = "false"

LOOKUP = [("lookup", {"id": "P1"})]


@tool
def lookup(id: str) -> str:
    """Look up a plan by id."""
    return f"{id}: Premium"


def other_threads(handler: ReplayGuardCallbackHandler, count: int) -> None:
    """Run a guarded tool call in each of `count` other threads through the same handler."""
    for i in range(count):
        config: Any = {"callbacks": [handler], "metadata": {"thread_id": f"other-{i}"}}
        assert lookup.invoke({"id": f"P{i}"}, config) == f"P{i}: Premium"


# -- item 1: an unknown outcome survives 1,000+ other threads ---------------------------------


def test_an_unknown_outcome_survives_a_thousand_other_threads():
    mailbox = Mailbox()
    model = ScriptedChatModel(script=[SEND, SEND, "I could not confirm the email."])
    handler = ReplayGuardCallbackHandler(CONFIG)  # default state: memory, max_threads=1000
    agent = agent_for(model, mailbox)

    out = agent.invoke(user(), cfg(handler))
    assert len(mailbox.sent) == 1
    assert "outcome is unknown" in tool_texts(out)[-1]

    # The first thread is now the least recently used of 1,200 threads.
    other_threads(handler, 1200)

    model.script.extend([SEND, SEND, "Still unconfirmed."])
    out = agent.invoke(user("please try to send it again"), cfg(handler))
    assert len(mailbox.sent) == 1, "the email must not be sent again after eviction"
    texts = tool_texts(out)
    assert "outcome is unknown" in texts[-1]
    assert "outcome is unknown" in texts[-2]

    # resolve still finds the mark, and lets the call run again.
    handler.resolve("t1", "send_email", EMAIL, "retry")
    model.script.extend([SEND, "Sent."])
    out = agent.invoke(user("it did not arrive"), cfg(handler))
    assert len(mailbox.sent) == 2
    assert tool_texts(out)[-1] == "sent"


def test_a_mark_written_after_its_thread_was_evicted_mid_call_is_kept():
    # The thread is evicted while its tool runs: the mark must not go to a dropped scope.
    handler = ReplayGuardCallbackHandler(CONFIG, max_threads=5)
    sent: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        other_threads(handler, 20)  # the table turns over while the email is being sent
        raise ConnectionError("connection reset by peer")

    from langchain.agents import create_agent
    from langchain.agents.middleware import ToolRetryMiddleware
    from langgraph.checkpoint.memory import InMemorySaver

    retry = ToolRetryMiddleware(max_retries=0, on_failure="continue", initial_delay=0)
    model = ScriptedChatModel(script=[SEND, SEND, "Unconfirmed."])
    agent = create_agent(model, [send_email], middleware=[retry], checkpointer=InMemorySaver())
    out = agent.invoke(user(), cfg(handler))
    assert len(sent) == 1
    assert "outcome is unknown" in tool_texts(out)[-1]


def test_many_threads_with_unknown_outcomes_are_kept_with_a_warning(caplog):
    handler = ReplayGuardCallbackHandler(CONFIG, max_threads=3)
    sent: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        raise ConnectionError("connection reset by peer")

    def send(thread: str) -> None:
        config: Any = {"callbacks": [handler], "metadata": {"thread_id": thread}}
        with pytest.raises(ConnectionError):
            send_email.invoke(EMAIL, config)

    with caplog.at_level(logging.WARNING, logger="langgraph_replay_guard"):
        for i in range(8):
            send(f"t{i}")
    assert any("max_threads" in r.getMessage() for r in caplog.records)
    other_threads(handler, 10)
    for i in range(8):
        config: Any = {"callbacks": [handler], "metadata": {"thread_id": f"t{i}"}}
        with pytest.raises(ToolCallBlockedError, match="outcome is unknown"):
            send_email.invoke(EMAIL, config)
    assert len(sent) == 8, "no thread's email was sent twice"


# -- item 2: a store that is down ----------------------------------------------------------


class FlakyStore(InMemoryStore):
    """An in-memory store whose every operation raises while `down` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def batch(self, ops: Any) -> Any:
        if self.down:
            raise ConnectionError("store unreachable: connection refused (db:5432)")
        return super().batch(ops)

    async def abatch(self, ops: Any) -> Any:
        return self.batch(ops)


def test_an_unsafe_call_is_refused_while_the_store_is_down():
    store = FlakyStore()
    mailbox = Mailbox()
    model = ScriptedChatModel(script=[SEND, "I could not confirm the email."])
    handler = ReplayGuardCallbackHandler(CONFIG, store=store)
    agent = agent_for(model, mailbox)
    agent.invoke(user(), cfg(handler))
    assert len(mailbox.sent) == 1  # the outcome is unknown, recorded in the store

    store.down = True
    model.script.extend([SEND, "The mail system is unavailable."])
    out = agent.invoke(user("send it again"), cfg(handler))
    assert len(mailbox.sent) == 1, "with the store down, the email must not be sent again"
    refusal = tool_texts(out)[-1]
    assert "send_email" in refusal
    assert "store" in refusal
    assert "connection refused" in refusal


def test_a_new_unsafe_or_idempotent_call_is_refused_and_a_pure_read_runs(caplog):
    store = FlakyStore()
    store.down = True
    config = GuardConfig(tools={"send_email": "unsafe", "charge": "idempotent", "lookup": "pure"})
    handler = ReplayGuardCallbackHandler(config, store=store)
    runs: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        runs.append("send_email")
        return "sent"

    @tool
    def charge(amount: int) -> str:
        """Charge a card."""
        runs.append("charge")
        return "charged"

    @tool
    def lookup(id: str) -> str:
        """Look up a plan by id."""
        runs.append("lookup")
        return f"{id}: Premium"

    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    calls = [("send_email", EMAIL), ("charge", {"amount": 5}), ("lookup", {"id": "P1"})]
    model = ScriptedChatModel(script=[calls, "Done."])
    agent = create_agent(model, [send_email, charge, lookup], checkpointer=InMemorySaver())
    with caplog.at_level(logging.WARNING, logger="langgraph_replay_guard"):
        out = agent.invoke(user(), cfg(handler))
    assert runs == ["lookup"], "only the pure read ran"
    email, card, read = tool_texts(out)
    assert "'send_email' (unsafe)" in email
    assert "connection refused" in email
    assert "'charge' (idempotent)" in card
    assert "connection refused" in card
    assert read == "P1: Premium"
    assert any("lookup" in r.getMessage() and "store" in r.getMessage() for r in caplog.records)


def test_a_mark_is_in_the_store_before_the_store_goes_down_mid_call():
    store = FlakyStore()
    handler = ReplayGuardCallbackHandler(CONFIG, store=store)
    sent: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        store.down = True  # the store goes down while the email is sent
        raise ConnectionError("connection reset by peer")

    config: Any = {"callbacks": [handler], "metadata": {"thread_id": "t1"}}
    with pytest.raises(ConnectionError):
        send_email.invoke(EMAIL, config)
    store.down = False
    with pytest.raises(ToolCallBlockedError, match="outcome is unknown"):
        send_email.invoke(EMAIL, config)
    assert len(sent) == 1
    # Claimed in the store before the body ran: another process sharing the store knows.
    other = ReplayGuardCallbackHandler(CONFIG, store=store)
    with pytest.raises(ToolCallBlockedError, match="outcome is unknown"):
        send_email.invoke(EMAIL, {**config, "callbacks": [other]})
    assert len(sent) == 1


def test_a_thread_with_many_unknown_outcomes_forgets_none():
    # 40 different emails each raised after sending, one after the other: 40 unknown
    # outcomes. None is forgotten (no cap): the first and the last stay refused.
    count = 40
    mailbox = Mailbox(failures=10_000)
    emails = [{"to": f"user{n}@example.com", "body": "hi"} for n in range(count)]
    model = ScriptedChatModel(
        script=[[("send_email", email)] for email in emails]
        + [[("send_email", emails[0])], [("send_email", emails[-1])], "Done."]
    )
    # The same failure again and again would stop the run first: that layer is not the point.
    handler = ReplayGuardCallbackHandler(CONFIG.model_copy(update={"max_same_failures": 0}))
    agent = agent_for(model, mailbox)
    out = agent.invoke(user(), {**cfg(handler), "recursion_limit": 500})
    texts = tool_texts(out)
    assert len(mailbox.sent) == count  # every email once, none twice
    assert "outcome is unknown" in texts[-1]
    assert "outcome is unknown" in texts[-2]
