"""A worker holding a claim for the wake-up tests: resumes a thread whose tool takes a while.

Usage: python tests/integration/proc_wake.py URI THREAD EFFECTS MARKER SECONDS

It resumes THREAD (stopped before its tools node) on PostgreSQL; its `send_email` touches
MARKER when its body starts, sleeps SECONDS, then appends `<time> <to>` to EFFECTS.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langgraph_replay_guard import ReplayGuard
from tests.integration.claim_graphs import POLICY, claim_graph
from tests.integration.wake_graphs import pool_backend, timed_tools


def main(argv: list[str]) -> None:
    uri, thread_id, effects, marker, seconds = argv
    with pool_backend(uri) as (saver, store):
        guard = ReplayGuard(POLICY, store=store)
        tools = timed_tools(Path(effects), Path(marker), float(seconds))
        graph = claim_graph("wrap", guard, tools, saver, store)
        graph.invoke(None, {"configurable": {"thread_id": thread_id}}, durability="sync")


if __name__ == "__main__":
    main(sys.argv[1:])
