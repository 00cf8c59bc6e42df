"""`replay-guard inspect`: a thread's guard state and ledger rows from SQLite and PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import warnings

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.types import RetryPolicy

from langgraph_replay_guard import GuardConfig, ReplayGuard, ReplayUnsafeError
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import warm_children

from .replay_graphs import ask_once, replay_graph


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return warm_children.run(
        [sys.executable, "-m", "langgraph_replay_guard.cli.main", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"LANGSMITH_TRACING": "false", "PATH": "/usr/bin:/bin"},
    )


def _run_thread(saver, store, thread: str) -> None:
    """A thread that loops on a lookup, then leaves an email with an unknown outcome."""
    failures = {"send_email": 1}

    @tool
    def lookup(id: str) -> str:
        """Read a record."""
        return f"record {id}"

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        if failures["send_email"]:
            failures["send_email"] -= 1
            msg = "connection reset after sending"
            raise ConnectionError(msg)
        return "sent"

    looping = [[("lookup", {"id": "P1"})]] * 4  # the 4th attempt ends the turn
    model = ScriptedChatModel(script=[*looping, ask_once([("send_email", {"to": "a@x.org"})])])
    guard = ReplayGuard(GuardConfig(tools={"send_email": "unsafe"}), store=store)
    graph = replay_graph(
        guard,
        model,
        [lookup, send_email],
        retry=RetryPolicy(max_attempts=2, initial_interval=0.01, retry_on=ConnectionError),
        checkpointer=saver,
    )
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"messages": [HumanMessage("look it up")]}, config, durability="sync")
    with pytest.raises(ReplayUnsafeError):
        graph.invoke({"messages": [HumanMessage("email it")]}, config, durability="sync")


def test_inspect_a_sqlite_thread(tmp_path):
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    db = tmp_path / "agent.sqlite"

    def connect():
        return sqlite3.connect(db, check_same_thread=False, isolation_level=None)

    saver, store = SqliteSaver(connect()), SqliteStore(connect())
    saver.setup()
    store.setup()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _run_thread(saver, store, "t.1")

    text = _cli("--db", str(db), "--thread", "t.1")
    assert text.returncode == 0, text.stderr
    assert "[replay_guard]" in text.stdout
    # The channel's own words (as Studio and --json show them).
    assert "totals: calls " in text.stdout
    assert "counters:" in text.stdout
    assert "recent_calls:" in text.stdout
    assert "send_email" in text.stdout
    assert "outcome unknown" in text.stdout
    assert "ConnectionError" in text.stdout

    report = json.loads(_cli("--db", str(db), "--thread", "t.1", "--json").stdout)
    guard = report["guard"]["replay_guard"]
    assert set(guard) == {
        *("turn", "epoch", "calls", "recent_calls", "counters", "cycle", "reminder"),
        *("stop", "stop_reason", "blocked", "totals", "notice", "reset", "failures", "shadow"),
    }
    assert set(guard["totals"]) == {"calls", "blocked", "aborts"}
    assert guard["totals"]["blocked"] >= 1  # the repeated lookups of the first turn
    (row,) = [r for r in report["ledger"] if r["tool"] == "send_email"]
    assert row["status"] == "started"
    assert row["args"] == {"to": "a@x.org"}

    other = _cli("--db", str(db), "--thread", "nobody")
    assert other.returncode == 1
    assert "no guard state" in other.stdout


def test_inspect_refuses_a_missing_database(tmp_path):
    result = _cli("--db", str(tmp_path / "nope.sqlite"), "--thread", "t")
    assert result.returncode == 2
    assert "no SQLite database" in result.stderr


@pytest.mark.postgres
def test_inspect_a_postgres_thread_without_printing_the_password(pg_uri):
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore
    from psycopg.conninfo import conninfo_to_dict

    with (
        PostgresSaver.from_conn_string(pg_uri) as saver,
        PostgresStore.from_conn_string(pg_uri) as store,
    ):
        saver.setup()
        store.setup()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _run_thread(saver, store, "pg-thread")
    parts = conninfo_to_dict(pg_uri)
    user, host, port = parts.get("user", "postgres"), parts["host"], parts["port"]
    uri = f"postgresql://{user}:s3cret-pw@{host}:{port}/{parts['dbname']}"  # trust auth
    result = _cli("--db", uri, "--thread", "pg-thread", "--json")
    assert result.returncode == 0, result.stderr
    assert "s3cret-pw" not in result.stdout + result.stderr
    assert any(r["tool"] == "send_email" for r in json.loads(result.stdout)["ledger"])
    refused = _cli("--db", "postgresql://postgres:s3cret-pw@127.0.0.1:1/postgres", "--thread", "x")
    assert refused.returncode == 2
    assert "s3cret-pw" not in refused.stdout + refused.stderr


def test_inspect_shows_what_enforcing_would_have_changed_in_shadow_mode(tmp_path):
    from langgraph.checkpoint.sqlite import SqliteSaver

    from langgraph_replay_guard.testing import agent_graph

    @tool
    def lookup(id: str) -> str:
        """Read a record."""
        return f"record {id}"

    db = tmp_path / "shadow.db"
    conn = sqlite3.connect(db, check_same_thread=False)
    model = ScriptedChatModel.looping("lookup", {"id": "P1"}, times=6)
    graph = agent_graph(
        model, [lookup], guard=ReplayGuard(mode="shadow"), checkpointer=SqliteSaver(conn)
    )
    graph.invoke({"messages": [HumanMessage("who?")]}, {"configurable": {"thread_id": "s"}})
    conn.close()
    done = _cli("--db", str(db), "--thread", "s")
    assert done.returncode == 0, done.stderr
    assert "shadow (what enforcing would have changed, whole thread):" in done.stdout
    assert "duplicate" in done.stdout
    assert "repeat_limit" in done.stdout
    as_json = json.loads(_cli("--db", str(db), "--thread", "s", "--json").stdout)
    shadow = next(iter(as_json["guard"].values()))["shadow"]
    assert {row[0] for row in shadow} >= {"duplicate", "repeat_limit"}
