"""`replay-guard export` then `eval` of a guarded thread: the guard's own answers are not scored."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver

from langgraph_replay_guard import LoopAbortedError, ReplayGuard, ReplayGuardCallbackHandler
from langgraph_replay_guard.export import trajectory_from_history
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import warm_children

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(REPO_ROOT)}


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


def _guarded_thread(db: Path, lookups: list[str]) -> None:
    """A real guarded `create_agent` run in SQLite: a read loop (2 duplicates, then the stop)."""

    @tool
    def get_details_by_id(id: str) -> str:
        """Look up a plan by id."""
        lookups.append(id)
        return f'{{"id": "{id}", "name": "Premium Plan"}}'

    model = ScriptedChatModel.looping("get_details_by_id", {"id": "P1002"}, times=10)
    guard = ReplayGuard()
    with sqlite3.connect(db, check_same_thread=False) as conn:
        agent = create_agent(
            model,
            [get_details_by_id],
            middleware=[guard.middleware()],
            checkpointer=SqliteSaver(conn),
        )
        config: Any = {"configurable": {"thread_id": "guarded"}}
        agent.invoke({"messages": [HumanMessage("What plan is P1002?")]}, config)
        assert guard.inspect(agent.get_state(config)).stop_reason == "repeat_limit"
    assert model.calls == 4


def test_export_then_eval_of_a_guarded_thread_scores_no_guard_answer_as_a_wrong_block(
    tmp_path: Path,
) -> None:
    db, out = tmp_path / "threads.db", tmp_path / "threads.jsonl"
    lookups: list[str] = []
    _guarded_thread(db, lookups)
    assert lookups == ["P1002"]  # the tool ran once: the guard answered the other three

    exported = _cli("export", "--db", db, "-o", out)
    assert exported.returncode == 0, exported.stderr
    assert "3 answered by the guard itself" in exported.stderr
    (trajectory,) = [json.loads(line) for line in out.read_text().splitlines()]
    marks = [call.get("guard") for call in trajectory["calls"]]
    assert marks == [None, "duplicate", "duplicate", "repeat_limit"]

    scored = _cli("eval", out, "--json")
    assert scored.returncode == 0, scored.stderr
    total = json.loads(scored.stdout)["total"]
    assert total["wrong"] == 0
    assert total["calls"] == 1  # the one call the tool answered
    assert total["guard_answered"] == 3
    assert total["guard_answered_by_reason"] == {"duplicate": 2, "repeat_limit": 1}

    text = _cli("eval", out)
    assert text.returncode == 0, text.stderr
    assert "Not scored: 3 calls the recorded run's guard answered itself" in text.stdout
    assert "Wrong blocks: 0 of 0 blocked" in text.stdout


def test_the_callback_handlers_refusals_are_not_scored_either(tmp_path: Path) -> None:
    # The handler raises; the ToolNode writes the refusal: known by its text only.
    db, out = tmp_path / "threads.db", tmp_path / "threads.jsonl"
    lookups: list[str] = []

    @tool
    def get_details_by_id(id: str) -> str:
        """Look up a plan by id."""
        lookups.append(id)
        return f"{id}: Premium Plan"

    model = ScriptedChatModel.looping("get_details_by_id", {"id": "P1002"}, times=10)
    handler = ReplayGuardCallbackHandler()
    with sqlite3.connect(db, check_same_thread=False) as conn:
        agent = create_agent(model, [get_details_by_id], checkpointer=SqliteSaver(conn))
        config: Any = {
            "configurable": {"thread_id": "handled"},
            "callbacks": [handler.check(agent)],
        }
        # The model comes back after the stop: a callback can only end the run by raising.
        with pytest.raises(LoopAbortedError):
            agent.invoke({"messages": [HumanMessage("What plan is P1002?")]}, config)
    assert lookups == ["P1002"]

    assert _cli("export", "--db", db, "-o", out).returncode == 0
    (trajectory,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert [call.get("guard") for call in trajectory["calls"]] == [None, *["refused"] * 3]
    scored = _cli("eval", out, "--json")
    assert scored.returncode == 0, scored.stderr
    total = json.loads(scored.stdout)["total"]
    assert (total["calls"], total["wrong"], total["guard_answered"]) == (1, 0, 3)


def test_a_guard_answer_recorded_before_the_mark_is_exported_as_refused() -> None:
    # A thread written by a guard that did not mark its answers yet (0.1.0): its refusals are
    # error ToolMessages with the engine's wording; a tool's own error is not taken for one.
    asked = AIMessage(
        "",
        id="ai-1",
        tool_calls=[
            {"name": "lookup", "args": {"id": "A"}, "id": "c1", "type": "tool_call"},
            {"name": "lookup", "args": {"id": "A"}, "id": "c2", "type": "tool_call"},
            {"name": "lookup", "args": {"id": "B"}, "id": "c3", "type": "tool_call"},
        ],
    )
    answers = [
        ToolMessage("A: ok", tool_call_id="c1", id="t1"),
        ToolMessage(
            "Not executed: an earlier call in this same batch already calls 'lookup'",
            tool_call_id="c2",
            status="error",
            id="t2",
        ),
        ToolMessage("Error: Not executed: the server is down", tool_call_id="c3", status="error"),
    ]
    history = [[HumanMessage("hi", id="h1"), asked, *answers]]
    calls = trajectory_from_history("old", history).trajectory["calls"]
    assert [call.get("guard") for call in calls] == [None, "refused", None]
