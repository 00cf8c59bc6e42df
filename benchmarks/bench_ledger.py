"""Cost of the replay ledger: a hit (a re-run call answered from its row) and a first run.

Run: python benchmarks/bench_ledger.py
Goal (issue 5): a ledger hit on SQLite well under 1 ms. Side by side: the same graph resumed
after an interrupt with the ledger answering the finished sibling, and without a ledger.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import tempfile
import time
import uuid
import warnings

os.environ["LANGSMITH_TRACING"] = "false"

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore
from langgraph.types import Command, interrupt

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.integrations.replay import replayed_message
from langgraph_replay_guard.ledger import CallIdentity, ReplayLedger, finished_entry, started_entry
from tests.integration.replay_graphs import asking_model, replay_graph

N = 2000


def _median_us(fn, n: int = N) -> float:
    times = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def _sqlite_store(path: str) -> SqliteStore:
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    return store


def ledger_costs(store, label: str) -> None:
    ledger = ReplayLedger(store)
    ids = [CallIdentity("thread-1", "tools", f"ai-{i}", f"call-{i}") for i in range(N)]
    args = {"to": "ann@example.com", "subject": "Your order", "body": "x" * 200}

    def first_run(i: int) -> None:  # started row before the tool, outcome row after it
        entry = started_entry(
            ids[i],
            tool="send_email",
            replay="unsafe",
            args_hash="sha256:0",
            args=args,
            idempotency_key=None,
        )
        ledger.put("thread-1", entry)
        result = {"content": "Email sent to ann@example.com", "status": "success"}
        ledger.put("thread-1", finished_entry(entry, result))

    def hit(i: int) -> None:  # a re-run: read the row, rebuild the ToolMessage
        entry = ledger.get(ids[i])
        assert entry is not None
        assert entry.has_outcome
        replayed_message(entry, {"name": "send_email", "id": f"call-{i}"})

    write = _median_us(first_run)
    read = _median_us(hit)
    print(f"{label:<22} first run (2 writes) {write:8.1f} us   hit (read + rebuild) {read:8.1f} us")


def resume_side_by_side() -> None:
    sent = []

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        sent.append(to)
        return f"Email sent to {to}"

    @tool
    def approve(to: str) -> str:
        """Ask a human."""
        return f"approved: {interrupt({'approve': to})}"

    calls = [("send_email", {"to": "a@x.org"}), ("approve", {"to": "b@x.org"})]
    config = GuardConfig(tools={"send_email": "unsafe", "approve": "unsafe"})

    def resume_ms(store) -> float:
        guard = ReplayGuard(config, store=store)
        model = asking_model(calls, turns=500)  # two model calls per round
        graph = replay_graph(guard, model, [send_email, approve], checkpointer=InMemorySaver())
        times = []
        sent.clear()
        for _ in range(100):
            cfg = {"configurable": {"thread_id": uuid.uuid4().hex}}
            graph.invoke({"messages": [HumanMessage("go")]}, cfg, durability="sync")
            start = time.perf_counter()
            graph.invoke(Command(resume="yes"), cfg, durability="sync")
            times.append(time.perf_counter() - start)
        print(f"  ({'ledger' if store else 'no ledger'}: {len(sent)} emails for 100 runs)")
        return statistics.median(times) * 1e3

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with tempfile.TemporaryDirectory() as tmp:
            with_ledger = resume_ms(_sqlite_store(os.path.join(tmp, "s.db")))
        without = resume_ms(None)
    print(
        f"resume after interrupt: with SQLite ledger {with_ledger:.2f} ms, "
        f"without ledger {without:.2f} ms; ratio {with_ledger / without:.2f}x"
    )


def main() -> None:
    ledger_costs(InMemoryStore(), "InMemoryStore")
    with tempfile.TemporaryDirectory() as tmp:
        ledger_costs(_sqlite_store(os.path.join(tmp, "ledger.db")), "SqliteStore (file)")
    resume_side_by_side()


if __name__ == "__main__":
    main()
