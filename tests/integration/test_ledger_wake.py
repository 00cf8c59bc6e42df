"""On PostgreSQL a worker waiting on another's claim wakes when its outcome lands (issue 36)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.replay import ledger
from tests import warm_children

from .claim_graphs import POLICY, claim_graph
from .conftest import _find_binary, _Server
from .wake_graphs import effect_times, pool_backend, timed_tools

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
HOLD = 2.0  # seconds the holder's tool runs (the waiter arrives meanwhile)


def _first_step(uri: str, tmp_path: Path) -> str:
    """Run the first step: the thread stops before its tools node, with one unsafe call."""
    with pool_backend(uri) as (saver, store):
        guard = ReplayGuard(POLICY, store=store)
        graph = claim_graph("wrap", guard, timed_tools(tmp_path / "x", tmp_path / "y", 0), saver)
        thread = f"t-{uuid.uuid4().hex[:8]}"
        graph.invoke({"messages": [HumanMessage("email Ann")]}, _config(thread))
    return thread


def _config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _holder(uri: str, thread: str, effects: Path, marker: Path) -> subprocess.Popen[bytes]:
    """Start a worker process that resumes the thread and holds the claim for `HOLD` s."""
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    script = str(Path(__file__).with_name("proc_wake.py"))
    args = [uri, thread, str(effects), str(marker), str(HOLD)]
    holder = warm_children.popen(
        [sys.executable, script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    deadline = time.monotonic() + 60
    while not marker.exists():  # the holder's tool body runs: its claim is written
        assert holder.poll() is None, holder.communicate()[1].decode()[-2000:]
        assert time.monotonic() < deadline, "the holder never started its tool"
        time.sleep(0.01)
    return holder


def _wait_on_holder(store: Any, saver: Any, thread: str, tmp_path: Path) -> tuple[str, float]:
    """Resume the thread here while the holder runs; (how it was answered, when it returned)."""
    guard = ReplayGuard(POLICY, store=store)
    tools = timed_tools(tmp_path / "never.txt", tmp_path / "never", 0)
    graph = claim_graph("wrap", guard, tools, saver)
    result = graph.invoke(None, _config(thread), durability="sync")
    done = time.time()
    answer = [m for m in result["messages"] if isinstance(m, ToolMessage)][-1]
    assert not (tmp_path / "never.txt").exists(), "the waiter ran the tool a second time"
    meta = answer.response_metadata.get("replay_guard")
    return ("replayed" if meta == "replayed" else "ran"), done


def _round(uri: str, store: Any, saver: Any, tmp_path: Path, name: str) -> float:
    """One holder, one waiter: the seconds between the holder's send and the waiter's answer."""
    thread = _first_step(uri, tmp_path)
    effects, marker = tmp_path / f"{name}.txt", tmp_path / f"{name}.started"
    holder = _holder(uri, thread, effects, marker)
    try:
        outcome, done = _wait_on_holder(store, saver, thread, tmp_path)
    finally:
        _out, err = holder.communicate(timeout=120)
    assert holder.returncode == 0, err.decode()[-2000:]
    assert outcome == "replayed", f"{name}: the waiter arrived after the holder finished"
    (sent,) = effect_times(effects)  # exactly one effect
    return done - sent


def test_a_waiter_wakes_when_the_holder_records_its_outcome(pg_uri, tmp_path, monkeypatch):
    # A poll of 3 s: a waiter that polls answers about 2 s after the holder's send.
    monkeypatch.setattr(ledger, "FIRST_PAUSE", 3.0)
    monkeypatch.setattr(ledger, "LONGEST_PAUSE", 3.0)
    with pool_backend(pg_uri) as (saver, store):
        late = _round(pg_uri, store, saver, tmp_path, "first")
    assert late < 0.5, f"the waiter answered {late:.2f} s after the holder's send"


def test_a_lost_listen_connection_falls_back_to_polling(tmp_path, monkeypatch):
    initdb, pg_ctl = _find_binary("initdb"), _find_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("no PostgreSQL server binaries to restart a server of this test's own")
    server = _Server(initdb, pg_ctl)
    try:
        uri = server.start()
        monkeypatch.setattr(ledger, "FIRST_PAUSE", 3.0)
        monkeypatch.setattr(ledger, "LONGEST_PAUSE", 3.0)
        with pool_backend(uri) as (saver, store):
            assert _round(uri, store, saver, tmp_path, "before") < 0.5  # woken: listening
            server._run(
                pg_ctl, "-D", str(server.data), "-l", str(server.log), "-m", "fast", "-w", "restart"
            )
            # The restart closed the LISTEN connection: the next waits poll (a short poll
            # here, so the test is quick), and still answer from the holder's outcome.
            monkeypatch.setattr(ledger, "FIRST_PAUSE", 0.2)
            monkeypatch.setattr(ledger, "LONGEST_PAUSE", 0.2)
            late = _round(uri, store, saver, tmp_path, "after")
            assert late < 2.0
            from langgraph_replay_guard.storage import wake

            listener = wake._listeners.get(store)
            assert listener is None or listener.broken or wake._failed.get(store) is not None
    finally:
        server.stop()
