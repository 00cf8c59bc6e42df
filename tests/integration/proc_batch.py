"""One worker running (or resuming) the batch of `batch_graphs`, for the batch-claim tests.

Usage: python tests/integration/proc_batch.py KIND TARGET THREAD EFFECTS STARTED SECONDS [BARRIER N]

KIND is `sqlite` (TARGET a folder) or `postgres` (TARGET the URI). Without BARRIER the worker
starts the thread (the parent kills it once STARTED exists); with it, the worker waits until N
workers marked themselves ready in the folder BARRIER, resumes the thread and prints one JSON
line: how many of its tool answers ran here and how many were replayed.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langchain_core.messages import HumanMessage, ToolMessage

from tests.integration.batch_graphs import backend, batch_graph, batch_tools


def main(argv: list[str]) -> None:
    kind, target, thread_id, effects, started, seconds, *rest = argv
    with backend(kind, target) as (saver, store):
        tools = batch_tools(Path(effects), started=Path(started), seconds=float(seconds))
        config = {"configurable": {"thread_id": thread_id}}
        if not rest:
            # The parent asserts all four calls were claimed in one round before the first
            # body started: on a loaded machine (make test, CI) a sibling thread may start
            # later than the product's 0.1 s window and make a round of its own. Every sibling
            # here says when it arrives, so a longer window changes no decision.
            from langgraph_replay_guard.storage import batch_claims

            batch_claims.WINDOW = 5.0
            graph = batch_graph(tools, saver, store)
            graph.invoke({"messages": [HumanMessage("email them")]}, config, durability="sync")
            return
        graph = batch_graph(tools, saver, store, interrupt_before=["tools"])
        folder, workers = Path(rest[0]), int(rest[1])
        (folder / str(os.getpid())).touch()
        deadline = time.monotonic() + 120
        while len(list(folder.iterdir())) < workers and time.monotonic() < deadline:
            time.sleep(0.005)
        ran = replayed = 0
        try:
            for update in graph.stream(None, config, durability="sync", stream_mode="updates"):
                for part in _parts(update.get("tools")):
                    for message in part.get("messages", []):
                        if not isinstance(message, ToolMessage):
                            continue
                        if message.response_metadata.get("replay_guard") == "replayed":
                            replayed += 1
                        else:
                            ran += 1
            outcome = "ok"
        except Exception as exc:  # reported to the parent, which asserts on it
            outcome = type(exc).__name__
        print(json.dumps({"outcome": outcome, "ran": ran, "replayed": replayed}))


def _parts(update: object) -> list[dict[str, object]]:
    parts = update if isinstance(update, list) else [update]
    return [part for part in parts if isinstance(part, dict)]


if __name__ == "__main__":
    main(sys.argv[1:])
