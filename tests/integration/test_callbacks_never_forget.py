"""Issue 32, seam 6: the callback handler never forgets a mark that protects a side effect.

(a) The handler's store goes down while an unsafe tool runs (it sent, then raised): the mark
    must already be durable, so that a new process with the store back, after this one exits
    normally or is killed with SIGKILL, refuses the identical call (one email, not two). A
    process killed inside the tool body leaves the same durable unknown outcome.
(b) One batch of 40 different unsafe calls that all raise after sending: every one stays
    protected (no cap forgets 8 of them); after the operator settles 32, the model's retry
    of the other 8 sends nothing.

Real processes, a real `SqliteStore` whose connection is closed under the handler, effects
counted by the tool body in a file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import GuardConfig, ReplayGuardCallbackHandler
from langgraph_replay_guard.integrations.callbacks import ToolCallBlockedError
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import warm_children

os.environ["LANGSMITH_TRACING"] = "false"

CHILD = Path(__file__).with_name("proc_callbacks_marks.py")
ROOT = Path(__file__).resolve().parents[2]


class Files:
    """The store, checkpoints and outbox of one scenario, shared by its processes."""

    def __init__(self, tmp_path: Path) -> None:
        self.store = str(tmp_path / "guard.db")
        self.checkpoints = str(tmp_path / "checkpoints.db")
        self.outbox = tmp_path / "outbox.txt"

    def argv(self, mode: str) -> list[str]:
        return [sys.executable, str(CHILD), self.store, self.checkpoints, str(self.outbox), mode]

    def sent(self) -> int:
        """How many emails the tool body really sent, in every process."""
        if not self.outbox.exists():
            return 0
        return len(self.outbox.read_text(encoding="utf-8").splitlines())


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "LANGSMITH_TRACING": "false"}


def run(files: Files, mode: str) -> dict[str, Any]:
    """Run the child to its end; its JSON line."""
    done = warm_children.run(
        files.argv(mode), capture_output=True, text=True, timeout=120, env=_env(), check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_and_kill(files: Files, mode: str, line: str) -> None:
    """Run the child until it prints `line`, then kill it with SIGKILL."""
    child = warm_children.popen(
        files.argv(mode), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    try:
        assert child.stdout is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            got = child.stdout.readline()
            if got.strip() == line or not got:
                break
        assert got.strip() == line, (child.stderr.read() if child.stderr else "")[-3000:]
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.wait(timeout=30)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()
    assert child.returncode == -signal.SIGKILL


# -- (a) the store is down when the unsafe tool raises ---------------------------------------


@pytest.mark.parametrize("end", ["exit", "sigkill"])
def test_a_mark_made_while_the_store_is_down_survives_the_process(tmp_path, end):
    files = Files(tmp_path)
    if end == "exit":
        first = run(files, "down-exit")
        assert "connection reset by peer" in first["tool_messages"][0]
    else:
        run_and_kill(files, "down-kill", "ready")
    assert files.sent() == 1

    # A new process, the store back: the model sends the same email again.
    again = run(files, "again")
    assert files.sent() == 1, "the email must not be sent a second time"
    refusal = again["tool_messages"][-1]
    assert "outcome is unknown" in refusal
    assert "send_email" in refusal


def test_a_process_killed_inside_an_unsafe_tool_leaves_a_durable_unknown_outcome(tmp_path):
    files = Files(tmp_path)
    run_and_kill(files, "kill-in-body", "sent")
    assert files.sent() == 1

    resumed = run(files, "resume")  # the pending call runs again on resume
    assert files.sent() == 1, "the resumed call must not send a second email"
    refusal = resumed["tool_messages"][-1]
    assert "outcome is unknown" in refusal
    assert "its end was never recorded" in refusal
    again = run(files, "again")
    assert files.sent() == 1
    assert "outcome is unknown" in again["tool_messages"][-1]


def test_the_store_down_before_an_unsafe_call_refuses_it_loudly(tmp_path):
    # Down before the body: nothing can be claimed, so nothing runs, and the model (and the
    # log) are told the store is down and that nothing with side effects can run safely.
    files = Files(tmp_path)
    sent: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        return "sent"

    with SqliteStore.from_conn_string(files.store) as store:
        store.setup()
        handler = ReplayGuardCallbackHandler(
            GuardConfig(tools={"send_email": "unsafe"}), store=store
        )
        store.conn.close()
        model = ScriptedChatModel(script=[[("send_email", {"to": "ann", "body": "hi"})], "Sorry."])
        agent = create_agent(model, [send_email], checkpointer=InMemorySaver())
        out = agent.invoke(
            {"messages": [HumanMessage("send it")]},
            {"configurable": {"thread_id": "t1"}, "callbacks": [handler]},
        )
    assert sent == []
    refusal = [m.text for m in out["messages"] if isinstance(m, ToolMessage)][-1]
    assert "'send_email' (unsafe)" in refusal
    assert "store failed" in refusal
    assert "nothing with side effects can run safely" in refusal


# -- (b) one batch of 40 unsafe calls that all raise after sending ----------------------------

COUNT = 40


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_batch_of_forty_unknown_outcomes_forgets_none(tmp_path, kind):
    emails = [{"to": f"user{n}@example.com", "body": "hi"} for n in range(COUNT)]
    sent: list[str] = []
    all_sent = threading.Barrier(COUNT, timeout=60)

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        if len(sent) <= COUNT:
            all_sent.wait()  # the first batch runs all at once, as the issue saw it
        # Then they fail in order: the oldest outcomes are the first a cap would drop.
        time.sleep(0.02 * int(to[4:].split("@")[0]))
        raise ConnectionError("connection reset by peer")  # sent, the answer lost

    with ExitStack() as stack:
        store: BaseStore | None = None
        if kind == "sqlite":
            store = stack.enter_context(SqliteStore.from_conn_string(str(tmp_path / "guard.db")))
            store.setup()
        config = GuardConfig(tools={"send_email": "unsafe"}, max_same_failures=0)
        handler = ReplayGuardCallbackHandler(config, store=store)
        batch = [("send_email", email) for email in emails]
        model = ScriptedChatModel(script=[batch, "Some emails may not have gone out."])
        retry = ToolRetryMiddleware(max_retries=0, on_failure="continue", initial_delay=0)
        agent = create_agent(model, [send_email], middleware=[retry], checkpointer=InMemorySaver())
        cfg: Any = {
            "configurable": {"thread_id": "t1"},
            "callbacks": [handler],
            "max_concurrency": COUNT,
        }
        agent.invoke({"messages": [HumanMessage("send the newsletter")]}, cfg)
        assert len(sent) == COUNT

        # The operator finds the 32 newest in the mail server's log and settles them.
        for email in emails[COUNT - 32 :]:
            handler.resolve("t1", "send_email", email, "succeeded", "delivered")

        # The model retries the other 8: their outcome is still unknown.
        model.script.extend([[("send_email", e) for e in emails[: COUNT - 32]], "Unsure."])
        out = agent.invoke({"messages": [HumanMessage("did they all go out?")]}, cfg)
        assert len(sent) == COUNT, "none of the 8 unsettled emails may be sent twice"
        texts = [m.text for m in out["messages"] if isinstance(m, ToolMessage)][-8:]
        assert all("outcome is unknown" in text for text in texts), texts
        # They are all still listed for the operator (a page at a time), and settle one by one.
        listed = [
            outcome
            for offset in range(0, 9, 3)
            for outcome in handler.unknown_outcomes("t1", limit=3, offset=offset)
        ]
        assert sorted(o.args for o in listed) == sorted(
            f"to='{e['to']}', body='hi'" for e in emails[: COUNT - 32]
        )
        assert {o.error for o in listed} == {"ConnectionError: connection reset by peer"}
        for email in emails[: COUNT - 32]:
            handler.resolve("t1", "send_email", email, "failed", "bounced")
        assert handler.unknown_outcomes("t1") == []


# -- what settles a claim, and marks of earlier releases -------------------------------------


def test_an_unsafe_tool_that_asks_a_human_runs_again_on_resume(tmp_path):
    # `interrupt()` is a pause LangGraph reruns by design: the claim written when the tool
    # started is settled, so the rerun on resume is not taken for an unknown outcome.
    from langgraph.types import Command, interrupt

    sent: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email, once a human approves it."""
        if interrupt({"send to": to}) != "yes":
            return "not sent"
        sent.append(to)
        return "sent"

    with SqliteStore.from_conn_string(str(tmp_path / "guard.db")) as store:
        store.setup()
        handler = ReplayGuardCallbackHandler(
            GuardConfig(tools={"send_email": "unsafe"}), store=store
        )
        model = ScriptedChatModel(script=[[("send_email", {"to": "ann", "body": "hi"})], "Sent."])
        agent = create_agent(model, [send_email], checkpointer=InMemorySaver())
        cfg: Any = {"configurable": {"thread_id": "t1"}, "callbacks": [handler]}
        paused = agent.invoke({"messages": [HumanMessage("send it")]}, cfg)
        assert "__interrupt__" in paused
        assert sent == []
        out = agent.invoke(Command(resume="yes"), cfg)
    assert sent == ["ann"]
    assert [m.text for m in out["messages"] if isinstance(m, ToolMessage)] == ["sent"]


def test_a_mark_an_earlier_release_kept_in_the_thread_state_still_refuses():
    # Earlier releases kept the marks in a list inside the thread's guard state.
    from langgraph.store.memory import InMemoryStore

    from langgraph_replay_guard.decisions.engine import call_facts
    from langgraph_replay_guard.integrations.callbacks.decisions import UNKNOWN_FIELD

    store = InMemoryStore()
    config = GuardConfig(tools={"send_email": "unsafe"})
    email = {"to": "ann", "body": "hi"}
    facts = call_facts(config, "send_email", email)
    old = {"k": facts.key, "n": "send_email", "a": facts.args_summary, "e": "ConnectionError: x"}
    handler = ReplayGuardCallbackHandler(config, store=store)
    scopes = handler._guard.scopes
    scope = scopes.get(("thread", "t1"))
    with scope.lock:
        scopes.write_field(scope, UNKNOWN_FIELD, [old])
    sent: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        return "sent"

    cfg: Any = {"callbacks": [ReplayGuardCallbackHandler(config, store=store)]}
    cfg["metadata"] = {"thread_id": "t1"}
    with pytest.raises(ToolCallBlockedError, match="outcome is unknown"):
        send_email.invoke(email, cfg)
    assert sent == []
    handler.resolve("t1", "send_email", email, "retry")
    assert send_email.invoke(email, cfg) == "sent"
    assert sent == ["ann"]


@pytest.mark.postgres
def test_a_mark_made_while_postgres_is_stopped_survives_the_handler():
    # The same as (a) on a PostgresStore whose server is really stopped while the tool runs
    # (a private server: the session's is shared). The second handler, on a new connection
    # once the server is back, stands for a new process: the first one's memory is gone.
    from langgraph.store.postgres import PostgresStore

    from .conftest import _find_binary, _Server

    initdb, pg_ctl = _find_binary("initdb"), _find_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("no PostgreSQL server binaries")
    server = _Server(initdb, pg_ctl)
    uri = server.start()
    options = f"-p {server.port} -k {server.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
    config = GuardConfig(tools={"send_email": "unsafe"})
    email = {"to": "ann@example.com", "body": "hi"}
    sent: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        if len(sent) == 1:
            server._run(pg_ctl, "-D", str(server.data), "-m", "immediate", "stop")
            raise ConnectionError("connection reset by peer")
        return "sent"

    try:
        with PostgresStore.from_conn_string(uri) as store:
            store.setup()
            first: Any = {
                "callbacks": [ReplayGuardCallbackHandler(config, store=store)],
                "metadata": {"thread_id": "t1"},
            }
            with pytest.raises(ConnectionError):
                send_email.invoke(email, first)
        server._run(
            pg_ctl, "-D", str(server.data), "-o", options, "-l", str(server.log), "-w", "start"
        )
        with PostgresStore.from_conn_string(uri) as store:
            again: Any = {
                "callbacks": [ReplayGuardCallbackHandler(config, store=store)],
                "metadata": {"thread_id": "t1"},
            }
            with pytest.raises(ToolCallBlockedError, match="outcome is unknown"):
                send_email.invoke(email, again)
            # Its end was never recorded: the operator sees no error, only that it started.
            (listed,) = again["callbacks"][0].unknown_outcomes("t1")
            assert (listed.tool, listed.error) == ("send_email", None)
    finally:
        server.stop()
    assert sent == ["ann@example.com"], "the email must not be sent a second time"


def test_two_handlers_on_one_store_never_both_run_an_identical_unsafe_call(tmp_path):
    # Two processes (two handlers, each on its own connection to one SQLite file) get the
    # same call at once: the claim is one atomic write, so only one body runs; the other is
    # refused while the first is still running.
    path = str(tmp_path / "guard.db")
    config = GuardConfig(tools={"send_email": "unsafe"})
    email = {"to": "ann@example.com", "body": "hi"}
    sent: list[str] = []
    inside = threading.Event()

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        inside.set()
        time.sleep(0.5)  # still sending when the other process asks
        return "sent"

    results: dict[str, str] = {}

    def worker(name: str, started: threading.Event | None) -> None:
        if started is not None:
            started.wait(30)
        with SqliteStore.from_conn_string(path) as store:
            store.setup()
            cfg: Any = {
                "callbacks": [ReplayGuardCallbackHandler(config, store=store)],
                "metadata": {"thread_id": "t1"},
            }
            try:
                results[name] = send_email.invoke(email, cfg)
            except ToolCallBlockedError as error:  # the refusal, not any error
                results[name] = str(error)

    with SqliteStore.from_conn_string(path) as store:
        store.setup()
    first = threading.Thread(target=worker, args=("first", None))
    second = threading.Thread(target=worker, args=("second", inside))
    first.start()
    second.start()
    first.join(60)
    second.join(60)
    assert sent == ["ann@example.com"]
    assert results["first"] == "sent"
    assert "it may still be running" in results["second"]


def test_a_claim_the_store_could_not_clear_is_taken_over_only_by_its_own_process(tmp_path):
    # The store refuses writes (another connection holds SQLite's write lock) just as an
    # unsafe call returns: its claim stays. Another process cannot know the call ended and
    # keeps refusing the identical call; this one knows, and runs it again when asked.
    import sqlite3

    path = str(tmp_path / "guard.db")
    config = GuardConfig(tools={"send_email": "unsafe"})
    email = {"to": "ann@example.com", "body": "hi"}
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    sent: list[str] = []

    @tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append(to)
        if len(sent) == 1:
            blocker.execute("BEGIN IMMEDIATE")  # the store is locked from now on
        return "sent"

    with (
        SqliteStore.from_conn_string(path) as store,
        SqliteStore.from_conn_string(path) as other_store,
    ):
        store.setup()
        store.conn.execute("PRAGMA busy_timeout = 0")  # fail at once rather than wait
        cfg: Any = {
            "callbacks": [ReplayGuardCallbackHandler(config, store=store)],
            "metadata": {"thread_id": "t1"},
        }
        assert send_email.invoke(email, cfg) == "sent"
        blocker.execute("COMMIT")

        other: Any = {**cfg, "callbacks": [ReplayGuardCallbackHandler(config, store=other_store)]}
        with pytest.raises(ToolCallBlockedError, match="its end was never recorded"):
            send_email.invoke(email, other)
        assert send_email.invoke(email, cfg) == "sent"
        assert sent == ["ann@example.com"] * 2
        # Ended normally this time: nothing is left to resolve, in any process.
        assert ReplayGuardCallbackHandler(config, store=other_store).unknown_outcomes("t1") == []
    blocker.close()
