"""A child process for the crash tests: runs a guarded graph and kills itself at a tool boundary.

Usage: python -m tests.integration.crash_child '<json options>'

Options: backend ("sqlite" | "postgres"), db (file path or URI), thread, durability, scenario
("batch" | "retry" | "interrupt"), kill_at (None | "before_effect" | "after_effect" |
"after_outcome" | "after_checkpoint"), effects (file the side effects append to), phase ("run" |
"resolve"), tool_call_id and outcome (phase "resolve").

The side effects append a line to `effects` with os.write on an O_APPEND descriptor, so a
SIGKILL right after it cannot lose it: the parent counts executions exactly. The process prints
one JSON line with what happened: {"status": "done" | "unknown" | "interrupted", ...}.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import sys
from collections.abc import Iterator
from typing import Any

os.environ["LANGSMITH_TRACING"] = "false"

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.store.base import BaseStore
from langgraph.types import Command, RetryPolicy, interrupt

from langgraph_replay_guard import GuardConfig, ReplayGuard, ReplayUnsafeError
from langgraph_replay_guard.testing import ScriptedChatModel

from .replay_graphs import REPLAY_POLICY, ask_once, replay_graph

EMAIL = ("send_email", {"to": "ann@example.com"})
CHARGE = ("charge_card", {"amount": 20})
LOOKUP = ("lookup", {"id": "P1"})
APPROVE = ("approve_and_send", {"to": "bob@example.com"})


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class Harness:
    def __init__(self, opts: dict[str, Any]) -> None:
        self.opts = opts
        self.kill_at = opts.get("kill_at")
        self.effects = opts["effects"]
        self.transient = opts["scenario"] == "retry"

    def effect(self, tool_name: str, detail: str) -> None:
        fd = os.open(self.effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{tool_name}\t{detail}\n".encode())
        finally:
            os.close(fd)

    def count(self, tool_name: str) -> int:
        if not os.path.exists(self.effects):
            return 0
        with open(self.effects, encoding="utf-8") as handle:
            return sum(1 for line in handle if line.split("\t", 1)[0] == tool_name)

    def boundary(self, name: str) -> None:
        if self.kill_at == name:
            _die()

    def tools(self) -> list[Any]:
        harness = self

        @tool
        def send_email(to: str) -> str:
            """Send an email (unsafe)."""
            harness.boundary("before_effect")
            harness.effect("send_email", to)
            harness.boundary("after_effect")
            return f"Email sent to {to}"

        @tool
        def charge_card(amount: int, idempotency_key: str) -> str:
            """Charge a card (idempotent by key)."""
            harness.effect("charge_card", idempotency_key)
            if harness.transient and harness.count("charge_card") == 1:
                msg = "payment API timed out"
                raise ConnectionError(msg)  # RetryPolicy retries the tools node
            return f"Charged {amount}"

        @tool
        def lookup(id: str) -> str:
            """Read a record (pure)."""
            harness.effect("lookup", id)
            return f"record {id}"

        @tool
        def approve_and_send(to: str) -> str:
            """Ask a human, then send (unsafe)."""
            if interrupt({"approve": to}) != "yes":
                return "Not approved"
            harness.boundary("before_effect")
            harness.effect("approve_and_send", to)
            harness.boundary("after_effect")
            return f"Sent to {to} after approval"

        return [send_email, charge_card, lookup, approve_and_send]

    def model(self) -> ScriptedChatModel:
        calls = [APPROVE] if self.opts["scenario"] == "interrupt" else [EMAIL, CHARGE, LOOKUP]
        asking = ask_once(calls)

        def step(messages: list[Any]) -> Any:
            if any(isinstance(m, ToolMessage) for m in messages):
                self.boundary("after_checkpoint")  # the tools node's checkpoint is written
            return asking(messages)

        return ScriptedChatModel(script=[step] * 10)


class KillingStore(BaseStore):
    """Wraps the ledger's store: dies right after the unsafe call's outcome row is written."""

    def __init__(self, store: Any, harness: Harness) -> None:
        self._store = store  # the guard claims on the wrapped store itself
        self._harness = harness

    def batch(self, ops: Any) -> Any:
        ops = list(ops)
        results = self._store.batch(ops)
        for op in ops:
            self._after_write(getattr(op, "value", None))
        return results

    async def abatch(self, ops: Any) -> Any:
        return self.batch(ops)

    def _after_write(self, value: Any) -> None:
        if not isinstance(value, dict):
            return
        if value.get("replay") == "unsafe" and value.get("status") == "completed":
            self._harness.boundary("after_outcome")


@contextlib.contextmanager
def persistence(opts: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    if opts["backend"] == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        conn = sqlite3.connect(opts["db"], check_same_thread=False, isolation_level=None)
        store_conn = sqlite3.connect(opts["db"], check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA busy_timeout = 10000")
        store_conn.execute("PRAGMA busy_timeout = 10000")
        saver = SqliteSaver(conn)
        store = SqliteStore(store_conn)
        saver.setup()
        store.setup()
        yield saver, store
        return
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with (
        PostgresSaver.from_conn_string(opts["db"]) as saver,
        PostgresStore.from_conn_string(opts["db"]) as store,
    ):
        yield saver, store


def _pending_interrupts(graph: Any, config: dict[str, Any]) -> list[Any]:
    return list(graph.get_state(config).interrupts)


def _finished(messages: list[Any]) -> bool:
    return bool(messages) and isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls


def drive(opts: dict[str, Any]) -> dict[str, Any]:
    harness = Harness(opts)
    config = {"configurable": {"thread_id": opts["thread"]}}
    with persistence(opts) as (saver, store):
        guard = ReplayGuard(GuardConfig(tools=REPLAY_POLICY), store=KillingStore(store, harness))
        retry = None
        if opts["scenario"] == "retry":
            retry = RetryPolicy(max_attempts=3, initial_interval=0.01, retry_on=ConnectionError)
        graph = replay_graph(
            guard, harness.model(), harness.tools(), retry=retry, checkpointer=saver
        )
        kwargs = {"durability": opts["durability"]}
        resubmitted = False
        try:
            if opts["phase"] == "resolve":
                guard.resolve(
                    graph, config, opts["tool_call_id"], opts["outcome"], opts["result"], **kwargs
                )
            elif graph.get_state(config).created_at is None:
                graph.invoke({"messages": [HumanMessage("please do it")]}, config, **kwargs)
            for _ in range(5):  # resume until the run is over (or needs a human)
                state = graph.get_state(config)
                messages = state.values.get("messages", [])
                if any(i.value.get("approve") for i in state.interrupts):
                    graph.invoke(Command(resume="yes"), config, **kwargs)
                elif state.next or not messages:
                    graph.invoke(None, config, **kwargs)
                elif not _finished(messages):
                    # Under async durability LangGraph can lose a finished task's writes: the
                    # last checkpoint has nothing left to run although the model's tool calls
                    # were never answered. The app can only send the request again.
                    resubmitted = True
                    graph.invoke({"messages": [HumanMessage("please do it")]}, config, **kwargs)
                else:
                    break
        except ReplayUnsafeError as exc:
            return {"status": "unknown", "facts": exc.facts, "resubmitted": resubmitted}
        messages = graph.get_state(config).values["messages"]
        final = messages[-1]
        last_ai = [m for m in messages if isinstance(m, AIMessage) and m.tool_calls][-1]
        answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
        replayed = [
            m.name
            for m in messages
            if isinstance(m, ToolMessage) and m.response_metadata.get("replay_guard") == "replayed"
        ]
        return {
            "status": "done",
            "final": final.content if isinstance(final, AIMessage) else None,
            "all_answered": all(c["id"] in answered for c in last_ai.tool_calls),
            "replayed": replayed,
            "resubmitted": resubmitted,
        }


if __name__ == "__main__":
    print(json.dumps(drive(json.loads(sys.argv[1])), default=str), flush=True)
