"""Attacks on at-most-once where the crash matrix and the seam tests do not look (issue 32).

Each test counts effects with a real tool body. A break whose fix is not small is an
`xfail(strict=True)` naming it; what was tried and held is listed in docs/replay-safety.md.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.tools import tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import ReplayGuard, ReplayUnsafeError
from langgraph_replay_guard.crashtest import crashtest
from tests.integration.compositions import POLICY, SEND, turns

os.environ["LANGSMITH_TRACING"] = "false"

pytestmark = pytest.mark.filterwarnings("ignore::langgraph_replay_guard.ReplayGuardWarning")

GRAPHS = "tests.integration.proc_attack_graphs"


def _sqlite(tmp_path: Path) -> tuple[SqliteSaver, SqliteStore]:
    saver = SqliteSaver(sqlite3.connect(tmp_path / "checkpoints.db", check_same_thread=False))
    store = SqliteStore(
        sqlite3.connect(tmp_path / "store.db", check_same_thread=False, isolation_level=None)
    )
    store.setup()
    return saver, store


# -- a middleware outside the guard that changes the arguments on every run ------------------


@pytest.mark.parametrize("asynchronous", [False, True], ids=["invoke", "ainvoke"])
def test_a_fresh_stamp_outside_the_guard_is_no_corrected_retry(asynchronous: bool) -> None:
    """Guard last, a middleware outside it stamps each call with a fresh request id.

    Killed after the send's outcome was recorded and before the checkpoint, the resume's
    call arrives under the same ids with other arguments than the completed row. It was
    taken for a middleware's corrected retry (an argument variant whose first attempt's
    outcome is known) and claimed anew: two emails. A variant follows an attempt in the
    same run of the task; in a new run it is an unknown outcome (ReplayUnsafeError). The
    idempotent charge beside it got a new idempotency key the same way.
    """
    report = crashtest(
        "tests.integration.compositions:stamp_outside",
        compare_unguarded=not asynchronous,
        asynchronous=asynchronous,
        jobs=2,
        timeout=60,
    )
    assert report.ok, report.render()


def test_two_guards_with_their_own_namespaces_on_one_store_hold() -> None:
    """Held: each guard claims in its own namespace; every crash point, one body per call."""
    report = crashtest(f"{GRAPHS}:two_namespaces", compare_unguarded=True, jobs=2, timeout=60)
    assert report.ok, report.render()


# -- time travel after a nested agent's send ----------------------------------------------


ASK = ("ask_worker", {"task": "Email ann."})


def _supervisor(
    store: Any, saver: Any, wrapper: str, sent: list[str], steps: Any = ([ASK],)
) -> Any:
    """A supervisor whose `ask_worker` (of class `wrapper`) runs a worker that sends once."""

    @tool
    def send(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    guard = ReplayGuard(tools={**POLICY, "ask_worker": wrapper}, store=store)
    worker = create_agent(
        turns([SEND], final="Mailed."),
        [send],
        name="worker",
        middleware=[guard.middleware(name="worker")],
        store=store,
    )

    @tool
    def ask_worker(task: str) -> str:
        """Hand a task to the mail worker."""
        result = worker.invoke({"messages": [("user", task)]})
        return str(result["messages"][-1].text)

    return create_agent(
        turns(*steps),
        [ask_worker],
        middleware=[guard.middleware(name="supervisor")],
        checkpointer=saver,
        store=store,
    )


def _fork_before_the_model(agent: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The config of the checkpoint where the model is about to make its first call."""
    for snapshot in agent.get_state_history(config):
        if snapshot.next == ("model",) and len(snapshot.values["messages"]) == 1:
            return dict(snapshot.config)
    msg = "no checkpoint before the model's first call"
    raise AssertionError(msg)


def test_a_fork_before_a_top_level_send_is_stopped(tmp_path: Path) -> None:
    """What the nested case below is held to: a fork that asks the same send again stops."""
    saver, store = _sqlite(tmp_path)
    sent: list[str] = []

    @tool
    def send(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"sent to {to}"

    guard = ReplayGuard(tools=POLICY, store=store)
    agent = create_agent(
        turns([SEND]), [send], middleware=[guard.middleware()], checkpointer=saver, store=store
    )
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [("user", "go")]}, config, durability="sync")
    with pytest.raises(ReplayUnsafeError, match="fork or time travel"):
        agent.invoke(None, _fork_before_the_model(agent, config), durability="sync")
    assert sent == ["ann@example.com"]


@pytest.mark.parametrize("wrapper", ["pure", "idempotent"])
def test_a_fork_before_a_nested_send_is_stopped(tmp_path: Path, wrapper: str) -> None:
    """Time travel to before a supervisor's call of a pure or idempotent `ask_worker`.

    The model asks the same call again with new ids and the wrapper may run again; the
    worker's send was scoped by the enclosing call's ids (its anchor), so neither its row
    nor its identical-call lookup row was found: a second email, where the same send at the
    top of the graph stops. Its lookup by what encloses it (tool, arguments, node, no ids)
    finds the earlier send, made inside an enclosing call this history never answered.
    """
    saver, store = _sqlite(tmp_path)
    sent: list[str] = []
    agent = _supervisor(store, saver, wrapper, sent)
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [("user", "go")]}, config, durability="sync")
    assert sent == ["ann@example.com"]
    with pytest.raises(ReplayUnsafeError, match="identical earlier call"):
        agent.invoke(None, _fork_before_the_model(agent, config), durability="sync")
    assert sent == ["ann@example.com"]


@pytest.mark.parametrize("wrapper", ["idempotent", "unsafe"])  # a pure repeat is deduplicated
@pytest.mark.parametrize("steps", [([ASK], [ASK]), ([ASK, ASK],)], ids=["turns", "batch"])
def test_a_deliberate_repeat_of_a_nested_send_still_sends(
    tmp_path: Path, wrapper: str, steps: Any
) -> None:
    """The same `ask_worker` asked again after its answer, or twice in one AIMessage: two
    deliberate emails (the earlier enclosing call is answered, or a sibling)."""
    saver, store = _sqlite(tmp_path)
    sent: list[str] = []
    agent = _supervisor(store, saver, wrapper, sent, steps)
    config: dict[str, Any] = {"configurable": {"thread_id": "t"}}
    agent.invoke({"messages": [("user", "go")]}, config, durability="sync")
    assert sent == ["ann@example.com", "ann@example.com"]
