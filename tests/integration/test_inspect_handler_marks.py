"""`replay-guard inspect` lists the unknown outcomes a callback handler keeps in its store."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import GuardConfig, ReplayGuardCallbackHandler
from tests import warm_children


def _inspect(db: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return warm_children.run(
        [sys.executable, "-m", "langgraph_replay_guard.cli.main", "inspect", "--db", db, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_inspect_lists_a_handler_kept_mark(tmp_path: Any) -> None:
    """Issue 33 item 9: an operator sees the handler's unknown outcome from a terminal."""
    sent: list[str] = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        raise ConnectionError("connection reset after the request was sent")

    db = str(tmp_path / "agent.sqlite")
    with SqliteSaver.from_conn_string(db) as saver:
        saver.setup()  # the checkpointer's tables: the handler's thread has no checkpoint
    with SqliteStore.from_conn_string(db) as store:
        store.setup()
        handler = ReplayGuardCallbackHandler(
            GuardConfig(tools={"send_email": "unsafe"}), store=store
        )
        config: Any = {"callbacks": [handler], "metadata": {"thread_id": "t1"}}
        with pytest.raises(ConnectionError):
            send_email.invoke({"to": "ann@example.com"}, config)
    assert sent == ["ann@example.com"]

    shown = _inspect(db, "--thread", "t1")
    assert shown.returncode == 0, shown.stderr
    assert "callback handler: 1 unknown outcome(s)" in shown.stdout
    assert "send_email(" in shown.stdout
    assert "ConnectionError" in shown.stdout

    as_json = _inspect(db, "--thread", "t1", "--json")
    assert as_json.returncode == 0, as_json.stderr
    (listed,) = json.loads(as_json.stdout)["handler_unknown_outcomes"]
    assert listed["tool"] == "send_email"
    assert listed["error"].startswith("ConnectionError")

    other = _inspect(db, "--thread", "t2", "--json")
    assert json.loads(other.stdout)["handler_unknown_outcomes"] == []
