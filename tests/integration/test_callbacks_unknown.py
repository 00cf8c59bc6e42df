"""The callback handler refuses an identical retry of an unsafe call whose outcome is unknown."""

from __future__ import annotations

import asyncio
import os
from contextlib import ExitStack

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import GuardConfig, ReplayGuardCallbackHandler, ToolPolicy
from langgraph_replay_guard.testing import ScriptedChatModel

os.environ["LANGSMITH_TRACING"] = "false"

EMAIL = {"to": "ann@example.com", "body": "Your refund is on its way."}
SEND = [("send_email", EMAIL)]
CONFIG = GuardConfig(tools={"send_email": "unsafe", "lookup": "pure"})


class RateLimitedError(Exception):
    """Raised by the mail API before it sends anything."""


class Mailbox:
    """An email tool that sends (records its effect), then loses the connection."""

    def __init__(self, error: Exception | None = None, *, failures: int = 1) -> None:
        self.sent: list[dict[str, str]] = []
        self.error = error if error is not None else ConnectionError("connection reset by peer")
        self.failures = failures

    def tool(self):
        @tool
        def send_email(to: str, body: str) -> str:
            """Send an email."""
            if isinstance(self.error, RateLimitedError) and self.failures:
                self.failures -= 1
                raise self.error  # refused by the API: nothing was sent
            self.sent.append({"to": to, "body": body})
            if self.failures:
                self.failures -= 1
                raise self.error  # the email went out, the answer was lost
            return "sent"

        return send_email


def agent_for(model, mailbox, **kwargs):
    # The tool's exception must reach the model rather than fail the run:
    # ToolRetryMiddleware(max_retries=0) answers it (and a refusal) with an error message.
    retry = ToolRetryMiddleware(max_retries=0, on_failure="continue", initial_delay=0)
    return create_agent(
        model, [mailbox.tool()], middleware=[retry], checkpointer=InMemorySaver(), **kwargs
    )


def cfg(handler, thread="t1"):
    return {"configurable": {"thread_id": thread}, "callbacks": [handler]}


def tool_texts(out):
    return [m.text for m in out["messages"] if isinstance(m, ToolMessage)]


def user(text="send Ann the refund email"):
    return {"messages": [HumanMessage(text)]}


def test_a_retry_after_an_unsafe_tool_raised_is_refused_until_resolved():
    mailbox = Mailbox()
    model = ScriptedChatModel(script=[SEND, SEND, "I could not confirm the email.", SEND, "Sent."])
    handler = ReplayGuardCallbackHandler(CONFIG)
    agent = agent_for(model, mailbox)

    out = agent.invoke(user(), cfg(handler))
    assert len(mailbox.sent) == 1, "the model's identical retry must not send a second email"
    first, second = tool_texts(out)
    assert "connection reset by peer" in first
    assert "outcome is unknown" in second
    assert "send_email" in second
    assert "ConnectionError: connection reset by peer" in second
    assert "handler.resolve('t1', 'send_email'" in second
    assert any(second in str(m.content) for m in model.seen[2]), "the model read the refusal"
    assert ("send_email", "unknown_outcome", 2) in handler.inspect("t1").blocked

    # A new turn does not clear it: the outcome is still unknown.
    again = agent.invoke(user("try again"), cfg(handler))
    assert len(mailbox.sent) == 1
    assert "outcome is unknown" in tool_texts(again)[-1]

    handler.resolve("t1", "send_email", EMAIL, "retry")
    model.script.extend([SEND, "Sent."])
    out = agent.invoke(user("it did not arrive, send it again"), cfg(handler))
    assert len(mailbox.sent) == 2, "after resolve('retry') the identical call runs again"
    assert tool_texts(out)[-1] == "sent"


def test_async_run_refuses_the_retry_and_runs_it_after_resolve():
    mailbox = Mailbox()
    model = ScriptedChatModel(script=[SEND, SEND, "Unconfirmed."])
    handler = ReplayGuardCallbackHandler(CONFIG)
    agent = agent_for(model, mailbox)

    async def run(text):
        return await agent.ainvoke(user(text), cfg(handler))

    out = asyncio.run(run("send it"))
    assert len(mailbox.sent) == 1
    assert "outcome is unknown" in tool_texts(out)[1]

    handler.resolve("t1", "send_email", EMAIL, "retry")
    model.script.extend([SEND, "Sent."])
    out = asyncio.run(run("send it again"))
    assert len(mailbox.sent) == 2
    assert tool_texts(out)[-1] == "sent"


def test_a_no_effect_error_lets_the_retry_run():
    config = GuardConfig(
        tools={"send_email": ToolPolicy(replay="unsafe", no_effect_errors=("RateLimitedError",))}
    )
    mailbox = Mailbox(RateLimitedError("slow down"))
    model = ScriptedChatModel(script=[SEND, SEND, "Sent."])
    handler = ReplayGuardCallbackHandler(config)
    out = agent_for(model, mailbox).invoke(user(), cfg(handler))
    assert len(mailbox.sent) == 1, "the retry ran and sent the email once"
    assert tool_texts(out)[-1] == "sent"


def test_idempotent_and_pure_failures_stay_plain_failures():
    config = GuardConfig(tools={"send_email": "idempotent"})
    mailbox = Mailbox()
    model = ScriptedChatModel(script=[SEND, SEND, "Sent."])
    handler = ReplayGuardCallbackHandler(config)
    agent_for(model, mailbox).invoke(user(), cfg(handler))
    assert len(mailbox.sent) == 2, "a callback cannot pass an idempotency key: retries run"

    mailbox = Mailbox()
    model = ScriptedChatModel(script=[SEND, SEND, "Sent."])
    handler = ReplayGuardCallbackHandler(GuardConfig(tools={"send_email": "pure"}))
    agent_for(model, mailbox).invoke(user(), cfg(handler))
    assert len(mailbox.sent) == 2


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_resumed_run_after_a_failed_run_refuses_the_pending_call_with_a_shared_store(
    kind, tmp_path
):
    # Without error handling the tool's exception fails the run; resuming the thread runs
    # the same tool call again. A second handler on the same store knows. (The process
    # lives on; a real process death is `test_resumed_run_after_a_process_death_...`.)
    mailbox = Mailbox()
    model = ScriptedChatModel(script=[SEND, "Could not confirm."])
    agent = create_agent(model, [mailbox.tool()], checkpointer=InMemorySaver())
    with ExitStack() as stack:
        if kind == "memory":
            store: BaseStore = InMemoryStore()
        else:
            cm = SqliteStore.from_conn_string(str(tmp_path / "guard.db"))
            store = stack.enter_context(cm)
            store.setup()
        with pytest.raises(ConnectionError):
            agent.invoke(user(), cfg(ReplayGuardCallbackHandler(CONFIG, store=store)))
        assert len(mailbox.sent) == 1

        other = ReplayGuardCallbackHandler(CONFIG, store=store)
        out = agent.invoke(None, cfg(other))
        assert len(mailbox.sent) == 1, "the resumed call did not send a second email"
        assert "outcome is unknown" in tool_texts(out)[-1]
        assert out["messages"][-1].text == "Could not confirm."
        other.resolve("t1", "send_email", EMAIL, "failed", "bounced")
        view = ReplayGuardCallbackHandler(CONFIG, store=store).inspect("t1")
        # The crashed call, its refused re-run, and the confirmed failure.
        assert view.totals.calls == 3
        assert view.blocked == (("send_email", "unknown_outcome", 1),)
        assert view.recent_calls[-1].outcome == "failure"


def test_resumed_run_after_a_process_death_refuses_the_pending_call(tmp_path):
    # A real crash: the child process runs the agent (its store and checkpoints in SQLite
    # files), the tool sends the email and the process is killed with SIGKILL before the
    # call ends. This process resumes the thread with a handler of its own on the same
    # store: the pending call runs again and is refused, nothing is sent twice.
    from langgraph.checkpoint.sqlite import SqliteSaver

    from tests.integration.test_callbacks_never_forget import Files, run_and_kill

    files = Files(tmp_path)
    run_and_kill(files, "kill-in-body", "sent")
    assert files.sent() == 1

    model = ScriptedChatModel(script=["Could not confirm."])
    retry = ToolRetryMiddleware(max_retries=0, on_failure="continue", initial_delay=0)

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        with open(files.outbox, "a", encoding="utf-8") as handle:
            handle.write(f"{to}\n")
        return "sent"

    with (
        SqliteStore.from_conn_string(files.store) as store,
        SqliteSaver.from_conn_string(files.checkpoints) as saver,
    ):
        agent = create_agent(model, [send_email], middleware=[retry], checkpointer=saver)
        handler = ReplayGuardCallbackHandler(CONFIG, store=store)
        out = agent.invoke(None, cfg(handler))
        assert files.sent() == 1, "the resumed call did not send a second email"
        refusal = tool_texts(out)[-1]
        assert "outcome is unknown" in refusal
        assert "its end was never recorded" in refusal
        assert out["messages"][-1].text == "Could not confirm."
        (pending,) = handler.unknown_outcomes("t1")
        assert (pending.tool, pending.error) == ("send_email", None)
        handler.resolve("t1", "send_email", EMAIL, "failed", "bounced")
        assert handler.unknown_outcomes("t1") == []
        view = ReplayGuardCallbackHandler(CONFIG, store=store).inspect("t1")
        assert view.blocked == (("send_email", "unknown_outcome", 1),)
        assert view.recent_calls[-1].outcome == "failure"


def test_resolve_succeeded_records_the_result_and_rejects_unknown_calls():
    mailbox = Mailbox()
    model = ScriptedChatModel(script=[SEND, "Unconfirmed."])
    handler = ReplayGuardCallbackHandler(CONFIG)
    agent_for(model, mailbox).invoke(user(), cfg(handler))

    with pytest.raises(ValueError, match="'succeeded', 'failed' or 'retry'"):
        handler.resolve("t1", "send_email", EMAIL, "done")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="No unknown outcome"):
        handler.resolve("t1", "send_email", {**EMAIL, "to": "bob@example.com"}, "retry")
    handler.resolve("t1", "send_email", EMAIL, "succeeded", "delivered, id 42")
    recent = handler.inspect("t1").recent_calls
    assert [(c.tool, c.outcome) for c in recent] == [
        ("send_email", "failure"),
        ("send_email", "success"),
    ]
    with pytest.raises(ValueError, match="No unknown outcome"):
        handler.resolve("t1", "send_email", EMAIL, "retry")


@pytest.mark.parametrize("kind", ["memory", "store"])
def test_unknown_outcomes_are_never_capped_per_thread(kind):
    # Issue 32 seam 6: a cap that forgets a mark lets its call run twice. Each mark is an
    # item of its own (or an entry in memory), read by key and listed a page at a time.
    from langgraph_replay_guard.decisions.engine import call_facts
    from langgraph_replay_guard.integrations.callbacks.decisions import find_mark, new_mark
    from langgraph_replay_guard.integrations.callbacks.marks import MarkBook

    book = MarkBook(InMemoryStore() if kind == "store" else None, ("ns", "callbacks"), 10)
    thread = ("thread", "t1")
    facts = [call_facts(CONFIG, "send_email", {"to": f"u{i}", "body": "b"}) for i in range(40)]
    for f in facts:
        book.put(thread, new_mark(f, ConnectionError("reset")))
    assert all(book.find(thread, f.key) is not None for f in facts), "no mark was dropped"
    first, rest = book.page(thread, limit=25), book.page(thread, limit=25, offset=25)
    assert len(first) == 25
    assert len(rest) == 15
    assert all(find_mark(first + rest, f.key) is not None for f in facts)
