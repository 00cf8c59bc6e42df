"""A worker on a pipelined PostgresStore that records an outcome, then stalls (issue 36 attack).

Usage: python tests/integration/proc_pipeline_holder.py URI THREAD EFFECTS DONE

It resumes THREAD (stopped before its tools node) with `PostgresStore(pipeline=True)`; its
`send_email` appends one line to EFFECTS. When the tools node's writes reach the
checkpointer (the guard has recorded the outcome) it touches DONE and stalls there, its
store open, until the test SIGKILLs it: a crash between the outcome and the checkpoint.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langchain_core.messages import ToolMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.store.postgres import PostgresStore

from langgraph_replay_guard import ReplayGuard
from tests.integration.claim_graphs import POLICY, claim_graph, effect_tools


class _StallAfterTools(PostgresSaver):
    """Stalls when the tools node's result is checkpointed (after the guard's outcome)."""

    done: Path

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        if any(
            isinstance(value, list) and value and isinstance(value[-1], ToolMessage)
            for _, value in writes
        ):
            self.done.touch()
            time.sleep(600)
        super().put_writes(config, writes, task_id, task_path)


def main(argv: list[str]) -> None:
    uri, thread_id, effects, done = argv
    with (
        _StallAfterTools.from_conn_string(uri) as saver,
        PostgresStore.from_conn_string(uri, pipeline=True) as store,
    ):
        saver.done = Path(done)
        guard = ReplayGuard(POLICY, store=store)
        graph = claim_graph("wrap", guard, effect_tools(Path(effects), seconds=0), saver, store)
        graph.invoke(None, {"configurable": {"thread_id": thread_id}}, durability="sync")


if __name__ == "__main__":
    main(sys.argv[1:])
