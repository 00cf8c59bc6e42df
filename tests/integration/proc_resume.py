"""One user turn of the custom graph in a fresh process, for the persistence tests.

Usage: python tests/integration/proc_resume.py {sqlite|postgres} TARGET THREAD_ID CALLS

TARGET is a SQLite file path or a PostgreSQL URI. The model makes CALLS identical
`get_details_by_id` calls and then answers; the guard uses `scope="thread"`. The script prints
one JSON line: how often each tool body ran in this process, and the guard view afterwards.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langchain_core.messages import HumanMessage

from langgraph_replay_guard import ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import POLICY, ToolRuns, build_custom_graph, make_tools

ARGS = {"id": "P1002"}


@contextmanager
def open_saver(kind: str, target: str) -> Iterator[Any]:
    if kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(target) as saver:
            yield saver
    elif kind == "postgres":
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(target) as saver:
            saver.setup()
            yield saver
    else:
        msg = f"unknown checkpointer {kind!r}"
        raise SystemExit(msg)


def main(argv: list[str]) -> None:
    kind, target, thread_id, calls = argv[0], argv[1], argv[2], int(argv[3])
    runs = ToolRuns()
    guard = ReplayGuard(POLICY.model_copy(update={"scope": "thread"}))
    model = ScriptedChatModel.looping("get_details_by_id", ARGS, times=calls, final="Done.")
    config = {"configurable": {"thread_id": thread_id}}
    with open_saver(kind, target) as saver:
        graph = build_custom_graph(guard, model, make_tools(runs), checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="Show me plan P1002.")]}, config)
        view = guard.inspect(graph.get_state(config))
    print(
        json.dumps(
            {
                "runs": dict(runs.counts),
                "model_calls": model.calls,
                "totals": {"calls": view.totals.calls, "blocked": view.totals.blocked},
                "stop_reason": view.stop_reason,
                "blocked": [list(b) for b in view.blocked],
                "counters": [[c.tool, c.count] for c in view.counters],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
