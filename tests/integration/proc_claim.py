"""One worker resuming a thread stopped before its tools node, for the concurrent-claim tests.

Usage: python tests/integration/proc_claim.py MODE KIND TARGET STORE_TARGET THREAD EFFECTS BARRIER N

MODE is `wrap` or `middleware`; KIND `sqlite` (TARGET and STORE_TARGET are files) or
`postgres` (both are the URI). The worker waits until all N workers marked themselves ready in
the folder BARRIER, resumes the thread with `stream(None, durability="sync")` and prints one
JSON line: `ran` (its tools node ran the tool), `replayed` (it answered from another worker's
outcome), `idle` (the thread was done before it loaded it) or the error's class name.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langchain_core.messages import ToolMessage

from langgraph_replay_guard import ReplayGuard
from tests.integration.claim_graphs import POLICY, claim_graph, effect_tools


@contextmanager
def open_backend(kind: str, target: str, store_target: str) -> Iterator[tuple[Any, Any]]:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.store.sqlite import SqliteStore

        saver_conn = sqlite3.connect(target, check_same_thread=False, timeout=30)
        store_conn = sqlite3.connect(
            store_target, check_same_thread=False, isolation_level=None, timeout=30
        )
        yield SqliteSaver(saver_conn), SqliteStore(store_conn)
        saver_conn.close()
        store_conn.close()
    else:
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.store.postgres import PostgresStore

        with (
            PostgresSaver.from_conn_string(target) as saver,
            PostgresStore.from_conn_string(store_target) as store,
        ):
            yield saver, store


def main(argv: list[str]) -> None:
    mode, kind, target, store_target, thread_id, effects, barrier, workers = argv
    with open_backend(kind, target, store_target) as (saver, store):
        guard = ReplayGuard(POLICY, store=store)
        graph = claim_graph(mode, guard, effect_tools(Path(effects)), saver, store)
        config = {"configurable": {"thread_id": thread_id}}
        _barrier(Path(barrier), int(workers))
        try:
            outcome = resume_outcome(graph, config)
        except Exception as exc:  # reported to the parent, which asserts on it
            outcome = type(exc).__name__
    print(json.dumps({"outcome": outcome}))


def resume_outcome(graph: Any, config: Any) -> str:
    """Resume a thread; `ran` or `replayed` by its last tool answer, `idle` without one."""
    answers: list[ToolMessage] = []
    for update in graph.stream(None, config, durability="sync", stream_mode="updates"):
        answers.extend(_tool_messages(update.get("tools")))
    if not answers:  # another worker had finished the thread before this one loaded it
        return "idle"
    if answers[-1].response_metadata.get("replay_guard") == "replayed":
        return "replayed"
    return "ran"


def _barrier(folder: Path, workers: int) -> None:
    """Wait until every worker is ready (connected, graph built), so they resume together."""
    (folder / str(os.getpid())).touch()
    deadline = time.monotonic() + 120
    while len(list(folder.iterdir())) < workers and time.monotonic() < deadline:
        time.sleep(0.01)


def _tool_messages(update: Any) -> list[ToolMessage]:
    """The ToolMessages a tools-node update wrote (a dict, or a list of Command updates)."""
    found: list[ToolMessage] = []
    for part in update if isinstance(update, list) else [update]:
        messages = part.get("messages", []) if isinstance(part, dict) else []
        found.extend(m for m in messages if isinstance(m, ToolMessage))
    return found


if __name__ == "__main__":
    main(sys.argv[1:])
