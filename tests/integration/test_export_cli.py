"""`replay-guard export`: real agent threads in SQLite and PostgreSQL become eval trajectories."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware, SummarizationMiddleware
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from langgraph_replay_guard.testing import ScriptedChatModel
from tests import warm_children
from tests.integration.stacks import counted_tools

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(REPO_ROOT)}

LANGSMITH_EXPORT = REPO_ROOT / "tests" / "fixtures" / "langsmith_runs.jsonl"
"""A hand-written LangSmith runs export: two traces of a LangGraph agent (chain, llm and tool
runs with `trace_id`, `parent_run_id`, `dotted_order`), one tool failing."""


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return warm_children.run(
        [sys.executable, "-m", "langgraph_replay_guard.cli.main", *map(str, args)],
        cwd=REPO_ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _tools() -> list[Any]:
    return list(counted_tools(Counter()).values())


def _ask(agent: Any, thread: str, *texts: str) -> None:
    cfg = {"configurable": {"thread_id": thread}}
    for text in texts:
        agent.invoke({"messages": [HumanMessage(text)]}, cfg, durability="sync")


def _populate(saver: Any) -> None:
    """Four threads of real `create_agent` runs (no network): plain, HITL, summarized, broken."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # Two user turns; the second reads P1 again.
        model = ScriptedChatModel(
            script=[[("lookup", {"id": "P1"})], "P1 is premium.", [("lookup", {"id": "P1"})], "ok"]
        )
        agent = create_agent(model, _tools(), checkpointer=saver)
        _ask(agent, "plain", "who is P1?", "and again?")

        # A send a human rejects, then one asked again and left waiting for review.
        send = {"to": "bob", "body": "hi"}
        model = ScriptedChatModel(
            script=[[("lookup", {"id": "B"})], [("send_email", send)], [("send_email", send)]]
        )
        hitl = HumanInTheLoopMiddleware(interrupt_on={"send_email": True})
        agent = create_agent(model, _tools(), middleware=[hitl], checkpointer=saver)
        cfg = {"configurable": {"thread_id": "hitl"}}
        agent.invoke({"messages": [HumanMessage("email bob")]}, cfg, durability="sync")
        assert agent.get_state(cfg).interrupts
        reject = {"decisions": [{"type": "reject", "message": "Not now."}]}
        agent.invoke(Command(resume=reject), cfg, durability="sync")
        assert agent.get_state(cfg).interrupts  # the second send waits for a human

        # Three user turns, each with a lookup; the history is summarized on the way.
        turns = [([("lookup", {"id": f"S{n}"})], f"S{n} found.") for n in range(3)]
        model = ScriptedChatModel(script=[step for turn in turns for step in turn])
        summarize = SummarizationMiddleware(
            ScriptedChatModel(script=["Earlier, S0 and S1 were looked up."] * 5),
            trigger=("messages", 5),
            keep=("messages", 1),
        )
        agent = create_agent(model, _tools(), middleware=[summarize], checkpointer=saver)
        _ask(agent, "summarized", "find S0", "find S1", "find S2")
        latest = agent.get_state({"configurable": {"thread_id": "summarized"}}).values
        in_latest = [
            c["args"]["id"] for m in latest["messages"] for c in getattr(m, "tool_calls", [])
        ]
        assert "S0" not in in_latest  # summarized away: only the history still has it

        model = ScriptedChatModel(script=[[("lookup", {"id": "X"})], "x"])
        _ask(create_agent(model, _tools(), checkpointer=saver), "broken", "x?")


def _check_export(db: str, out: Path) -> None:
    result = _cli("export", "--db", db, "-o", out)
    assert result.returncode == 0, result.stderr
    # The damaged thread is named and skipped; the others are written.
    assert "skipped thread 'broken'" in result.stderr
    assert "3 trajectories" in result.stderr
    runs = {t["id"]: t for t in map(json.loads, out.read_text().splitlines())}
    assert set(runs) == {"plain", "hitl", "summarized"}

    plain = runs["plain"]["calls"]
    assert [(c["name"], c["args"], c["turn"], c["error"]) for c in plain] == [
        ("lookup", {"id": "P1"}, 0, False),
        ("lookup", {"id": "P1"}, 1, False),
    ]
    assert plain[0]["result"] == "record P1: premium plan"

    hitl = runs["hitl"]["calls"]
    assert [(c["name"], c["error"]) for c in hitl] == [("lookup", False), ("send_email", True)]
    assert "Not now." in hitl[1]["result"]
    assert "1 call(s) without a result left out" in result.stderr  # the send awaiting review

    summarized = runs["summarized"]["calls"]
    assert [(c["args"]["id"], c["turn"]) for c in summarized] == [("S0", 0), ("S1", 1), ("S2", 2)]
    assert summarized[0]["result"] == "record S0: premium plan"

    # The output is what `eval` reads.
    evaluated = _cli("eval", out, "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads(evaluated.stdout)
    assert report["total"]["trajectories"] == 3
    assert report["total"]["calls"] == 7
    assert report["malformed"] == []

    # Named threads only; a thread with no checkpoint is listed, and nothing written is 1.
    one = _cli("export", "--db", db, "--thread", "plain", "hitl")
    assert one.returncode == 0, one.stderr
    assert [json.loads(line)["id"] for line in one.stdout.splitlines()] == ["plain", "hitl"]
    none = _cli("export", "--db", db, "--thread", "nobody")
    assert none.returncode == 1
    assert "skipped thread 'nobody': no checkpoint" in none.stderr


def test_export_sqlite_threads_and_evaluate_them(tmp_path):
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = tmp_path / "agent.sqlite"
    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    _populate(saver)
    with conn:
        conn.execute("UPDATE checkpoints SET checkpoint = X'c1c1c1' WHERE thread_id = 'broken'")
    conn.close()
    _check_export(str(db), tmp_path / "runs.jsonl")


@pytest.mark.postgres
def test_export_postgres_threads_and_evaluate_them(pg_uri, tmp_path):
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(pg_uri) as saver:
        saver.setup()
        _populate(saver)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(
            "UPDATE checkpoint_blobs SET blob = '\\xc1c1c1'::bytea, type = 'msgpack' "
            "WHERE thread_id = 'broken' AND channel = 'messages'"
        )
    _check_export(pg_uri, tmp_path / "runs.jsonl")


def test_export_refuses_a_missing_database(tmp_path):
    result = _cli("export", "--db", tmp_path / "nope.sqlite")
    assert result.returncode == 2
    assert "no SQLite database" in result.stderr


def test_export_a_langsmith_file_and_evaluate_it(tmp_path):
    out = tmp_path / "traces.jsonl"
    result = _cli("export", "--from-langsmith", LANGSMITH_EXPORT, "-o", out)
    assert result.returncode == 0, result.stderr
    assert "2 trajectories, 4 tool calls" in result.stderr
    first, second = map(json.loads, out.read_text().splitlines())
    assert first["id"] == "trace-1"
    assert first["model"] == "gpt-4.1-mini"
    assert [(c["name"], c["args"], c["turn"]) for c in first["calls"]] == [
        ("get_order", {"id": "A1"}, 0),
        ("get_order", {"id": "A1"}, 0),
        ("refund", {"id": "A1"}, 1),
    ]
    assert first["calls"][0]["result"] == "status: shipped"
    assert first["calls"][2]["error"] is True
    assert first["calls"][2]["result"].startswith("Error: ")
    assert second["calls"][0]["args"] == {"query": "refund policy"}
    evaluated = _cli("eval", out)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "2 trajectories, 4 calls" in evaluated.stdout

    bad = tmp_path / "bad.json"
    bad.write_text('[{"name": "x"}]')
    refused = _cli("export", "--from-langsmith", bad)
    assert refused.returncode == 2
    assert "not a LangSmith run" in refused.stderr


def test_a_lost_answer_is_taken_from_the_replay_ledger_under_the_namespace(tmp_path):
    from langgraph.store.sqlite import SqliteStore

    from langgraph_replay_guard.cli.export_cmd import _ledger_outcomes
    from langgraph_replay_guard.replay.ledger import LedgerEntry
    from langgraph_replay_guard.storage.ledger_io import ReplayLedger

    db = tmp_path / "agent.sqlite"
    with SqliteStore.from_conn_string(str(db)) as store:
        store.setup()
        ledger = ReplayLedger(store, namespace=("replay_guard", "acme"))
        done = {"content": "sent", "status": "success"}
        ledger.put("t", LedgerEntry(key="k1", status="completed", tool_call_id="c1", result=done))
        ledger.put("t", LedgerEntry(key="k2", status="started", tool_call_id="c2"))
    assert _ledger_outcomes(str(db), ("replay_guard", "acme"), ["t"]) == {
        "t": {"c1": ("sent", False)}
    }
    assert _ledger_outcomes(str(db), ("replay_guard",), ["t"]) == {}
