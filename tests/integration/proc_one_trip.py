"""A worker racing others on the same new unsafe calls through the ledger's admit plan.

Usage: python tests/integration/proc_one_trip.py URI THREAD CALLS EFFECTS BARRIER N PATH
(tests start a race of N of them with `race`)

Every worker admits calls 0 .. CALLS-1 of THREAD on PostgreSQL in the same order, after all N
workers marked themselves ready in the folder BARRIER, so they race on each call's claim. A
worker that is told to run a call appends `<thread>/<call>` to EFFECTS (its effect), then
records the outcome. PATH `one` claims every call with its first read (one statement for an
absent row; shipped, a thread's first reads claim with them after two found nothing); `two`
forces the two-round-trip claim, to race the two against each other; `async` is `one` on an
`AsyncPostgresStore` (the async driver of the same statements); `cursor` is `one` with the
statements on psycopg's cursor instead of libpq's own call. Prints one JSON line:
`{"ran": [...], "replayed": [...]}` (the calls' indexes).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langgraph.store.postgres import PostgresStore

from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import (
    CallContext,
    CallIdentity,
    Write,
    admit,
    args_digest,
    finished_entry,
    index_namespace,
    row_namespace,
)
from langgraph_replay_guard.storage import ledger_io, store_cas
from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan

PREFIX = ("replay_guard",)
ROOT = Path(__file__).resolve().parents[2]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def context(thread: str, i: int) -> CallContext:
    """Call `i` of a thread, as the gate builds it (one AIMessage per call)."""
    args = {"to": f"user{i}@example.com"}
    return CallContext(
        identity=CallIdentity(thread, "tools", f"ai-{i}", f"call-{i}"),
        tool="send_email",
        replay="unsafe",
        args=args,
        args_hash=args_digest(args),
        rows_ns=row_namespace(PREFIX, thread),
        index_ns=index_namespace(PREFIX, thread),
        wait=60.0,
        is_answered=lambda _tc, _ai: True,
        is_alive=lambda owner: owners.is_alive(owner, _now()),
        new_owner=lambda: owners.REGISTRY.new_owner(900.0, _now()),
        now=_now,
        elapsed=time.monotonic,
    )


def _outcome(ctx: CallContext, entry: Any) -> Any:
    yield Write(((ctx.rows_ns, entry.key, entry.to_value()),))


def _ready(barrier: str, workers: str) -> None:
    (Path(barrier) / str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while len(list(Path(barrier).iterdir())) < int(workers):
        assert time.monotonic() < deadline, "the other workers never came"
        time.sleep(0.005)


def _ran(admission: Any, thread: str, i: int, effects: str) -> Any:
    """The effect of a call this worker was told to run; its outcome row."""
    assert admission.kind == "run", admission
    assert admission.entry is not None
    with open(effects, "a", encoding="utf-8") as file:
        file.write(f"{thread}/{i}\n")
    return finished_entry(admission.entry, f"sent {i}", None, "success")


async def _amain(uri: str, thread: str, calls: int, effects: str, ready: Any) -> dict[str, Any]:
    from langgraph.store.postgres.aio import AsyncPostgresStore

    ran: list[int] = []
    replayed: list[int] = []
    async with AsyncPostgresStore.from_conn_string(uri) as store:
        ready()
        for i in range(calls):
            ctx = context(thread, i)
            admission = await arun_plan(store, admit(ctx))
            if admission.kind == "replay":
                replayed.append(i)
                continue
            done = _ran(admission, thread, i, effects)
            await arun_plan(store, _outcome(ctx, done))
            owners.REGISTRY.release(admission.entry.owner)
            ran.append(i)
    return {"ran": ran, "replayed": replayed}


def main(argv: list[str]) -> None:
    uri, thread, calls, effects, barrier, workers, path = argv
    if path == "two":
        store_cas._claims_new_row = lambda _op: False  # type: ignore[assignment]
    else:
        ledger_io.MISSES.STREAK = 0  # every first read claims with it: race that statement
    if path == "async":
        answer = asyncio.run(
            _amain(uri, thread, int(calls), effects, lambda: _ready(barrier, workers))
        )
        print(json.dumps(answer))
        return
    ran: list[int] = []
    replayed: list[int] = []
    with PostgresStore.from_conn_string(uri) as store:
        if path == "cursor":
            # Another cursor class: the guard's statements go through psycopg's cursor, not
            # libpq's own call (`store_cas._direct`), to race the two against each other.
            import psycopg

            store.conn.cursor_factory = type("OtherCursor", (psycopg.Cursor,), {})
        _ready(barrier, workers)
        for i in range(int(calls)):
            ctx = context(thread, i)
            admission = run_plan(store, admit(ctx))
            if admission.kind == "replay":
                replayed.append(i)
                continue
            done = _ran(admission, thread, i, effects)
            run_plan(store, _outcome(ctx, done))
            owners.REGISTRY.release(admission.entry.owner)
            ran.append(i)
    print(json.dumps({"ran": ran, "replayed": replayed}))


class Race(NamedTuple):
    """What the workers of one `race` did."""

    thread: str
    calls: int
    ran: list[int]  # the calls' indexes each worker ran, all workers together
    replayed: list[int]
    effects: list[str]  # the lines of EFFECTS: `<thread>/<call>` per run


def race(
    pg_uri: str,
    folder: Path,
    paths: list[str],
    *,
    calls: int = 30,
    env: Callable[[int], dict[str, str]] | None = None,
    start: Callable[..., Any] = subprocess.Popen,
) -> Race:
    """Race one worker of this script per entry of `paths` (its PATH) on a new thread.

    `env(n)` adds to worker n's environment; `start` starts it (`warm_children.popen`, or
    `subprocess.Popen` for a worker that must import psycopg afresh).
    """
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
    thread = f"t-{uuid.uuid4().hex[:8]}"
    effects, barrier = folder / "effects.txt", folder / "ready"
    barrier.mkdir()
    base = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    procs = []
    for n, path in enumerate(paths):
        args = [pg_uri, thread, str(calls), str(effects), str(barrier), str(len(paths)), path]
        procs.append(
            start(
                [sys.executable, __file__, *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**base, **(env(n) if env else {})},
            )
        )
    ran: list[int] = []
    replayed: list[int] = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err.decode()[-2000:]
        answer = json.loads(out.decode().strip().splitlines()[-1])
        ran += answer["ran"]
        replayed += answer["replayed"]
    return Race(thread, calls, ran, replayed, effects.read_text().splitlines())


if __name__ == "__main__":
    main(sys.argv[1:])
