"""Graphs for the batch-claim tests: one AIMessage asking several unsafe calls at once."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.tools import tool

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel

from .replay_graphs import ask_once, replay_graph

POLICY = GuardConfig(tools={"send_email": "unsafe", "lookup": "pure"}, on_unsafe="interrupt")
SENDS = [("send_email", {"to": f"{name}@example.com"}) for name in ("ann", "bob", "cy", "dee")]


def batch_tools(effects: Path, *, started: Path | None = None, seconds: float = 0.0) -> list[Any]:
    """`send_email` and `lookup` append one line per real run to `effects`.

    `send_email` touches `started` as its body begins (before its effect), then sleeps.
    """

    @tool
    def send_email(to: str) -> str:
        """Send an email (unsafe)."""
        if started is not None:
            started.touch()
        time.sleep(seconds)
        with effects.open("a") as file:
            file.write(f"{os.getpid()} send {to}\n")
        return f"Email sent to {to}"

    @tool
    def lookup(q: str) -> str:
        """Look something up (pure)."""
        with effects.open("a") as file:
            file.write(f"{os.getpid()} lookup {q}\n")
        return f"found {q}"

    return [send_email, lookup]


def effects_of(effects: Path, what: str = "send") -> list[str]:
    """The real runs of one tool, one line each."""
    lines = effects.read_text().splitlines() if effects.exists() else []
    return [line.split(" ")[2] for line in lines if line.split(" ")[1] == what]


def batch_graph(
    tools: list[Any], checkpointer: Any, store: Any, steps: list[Any] | None = None, **kw: Any
) -> Any:
    """A guarded custom graph whose model asks the four `SENDS` in one AIMessage."""
    model = ScriptedChatModel(script=steps or [ask_once(SENDS)] * 10)
    guard = ReplayGuard(POLICY, store=store)
    return replay_graph(guard, model, tools, checkpointer=checkpointer, store=store, **kw)


def fan_out_agent(tools: list[Any], checkpointer: Any, store: Any) -> Any:
    """`create_agent` with the guard's middleware: each call of the AIMessage is a `Send`."""
    from langchain.agents import create_agent

    model = ScriptedChatModel(script=[ask_once(SENDS)] * 10)
    guard = ReplayGuard(POLICY, store=store)
    return create_agent(
        model, tools, middleware=[guard.middleware()], checkpointer=checkpointer, store=store
    )


@contextmanager
def backend(kind: str, target: str) -> Iterator[tuple[Any, Any]]:
    """A durable checkpointer and store: SQLite files in folder `target`, or PostgreSQL."""
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        saver_conn = sqlite3.connect(Path(target) / "cp.db", check_same_thread=False, timeout=30)
        store_conn = sqlite3.connect(
            Path(target) / "store.db", check_same_thread=False, isolation_level=None, timeout=30
        )
        store = SqliteStore(store_conn)
        store.setup()
        try:
            yield SqliteSaver(saver_conn), store
        finally:
            saver_conn.close()
            store_conn.close()
    else:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.store.postgres import PostgresStore

        with (
            PostgresSaver.from_conn_string(target) as saver,
            PostgresStore.from_conn_string(target) as store,
        ):
            saver.setup()
            store.setup()
            yield saver, store
