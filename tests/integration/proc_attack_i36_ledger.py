"""A worker running the batch of `batch_graphs` on `AsyncPostgresStore`, killed by its parent.

Usage: python tests/integration/proc_attack_i36_ledger.py URI THREAD EFFECTS STARTED

The four calls' claims go in one statement on the store's event loop (`ledger_io._on_loop`);
each body touches STARTED, then sleeps: the parent SIGKILLs the worker once STARTED exists.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langchain_core.messages import HumanMessage

from tests.integration.batch_graphs import batch_graph, batch_tools


async def main(uri: str, thread_id: str, effects: str, started: str) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.store.postgres.aio import AsyncPostgresStore

    async with (
        AsyncPostgresSaver.from_conn_string(uri) as saver,
        AsyncPostgresStore.from_conn_string(uri) as store,
    ):
        await saver.setup()
        await store.setup()
        tools = batch_tools(Path(effects), started=Path(started), seconds=60.0)
        graph = batch_graph(tools, saver, store)
        config = {"configurable": {"thread_id": thread_id}}
        await graph.ainvoke({"messages": [HumanMessage("email them")]}, config, durability="sync")


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
