"""A worker replaying calls another worker recorded, racing others, on PostgreSQL.

Usage: python tests/integration/proc_call_cost.py URI THREAD CALLS BARRIER N MODE

Every worker admits calls 0 .. CALLS-1 of THREAD (already recorded: each outcome holds
numbers beyond 64 bits, tagged by the result codec) after all N workers marked
themselves ready in the folder BARRIER. MODE `read` reads first (a thread being replayed),
`claims` sends each first read with its claim (`_PG_CLAIM_IF_ABSENT`), `async` is `claims`
with 8 tasks gathered on an `AsyncPostgresStore`. Prints one JSON line: `{"ran": [...],
"values": [...]}`, the calls run (must be none) and the values each replay read back.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langgraph.store.postgres import PostgresStore

from langgraph_replay_guard.replay.ledger import admit
from langgraph_replay_guard.replay.result_codec import decode_result
from langgraph_replay_guard.storage import ledger_io
from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan
from tests.integration.proc_one_trip import _ready, context


def _answer(admission: Any, i: int, ran: list[int], values: list[Any]) -> None:
    if admission.kind != "replay":
        ran.append(i)
        return
    content, _artifact, _status = decode_result(admission.entry.result)
    values.append(content)


async def _amain(uri: str, thread: str, calls: int) -> dict[str, Any]:
    from langgraph.store.postgres.aio import AsyncPostgresStore

    ran: list[int] = []
    values: list[Any] = []
    async with AsyncPostgresStore.from_conn_string(uri) as store:

        async def one(i: int) -> None:
            _answer(await arun_plan(store, admit(context(thread, i))), i, ran, values)

        await asyncio.gather(*(one(i) for i in range(calls) for _ in range(8)))
    return {"ran": ran, "values": values}


def main(argv: list[str]) -> None:
    uri, thread, calls, barrier, workers, mode = argv
    ledger_io.MISSES.STREAK = 0 if mode in ("claims", "async") else 10**9
    _ready(barrier, workers)
    if mode == "async":
        print(json.dumps(asyncio.run(_amain(uri, thread, int(calls)))))
        return
    ran: list[int] = []
    values: list[Any] = []
    with PostgresStore.from_conn_string(uri) as store:
        for i in range(int(calls)):
            _answer(run_plan(store, admit(context(thread, i))), i, ran, values)
    print(json.dumps({"ran": ran, "values": values}))


if __name__ == "__main__":
    main(sys.argv[1:])
