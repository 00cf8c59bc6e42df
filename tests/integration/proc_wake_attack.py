"""A worker that claims one call through the ledger's admit plan, then hangs (to be SIGKILLed).

Usage: python tests/integration/proc_wake_attack.py URI THREAD REPLAY [EFFECTS BARRIER N]

REPLAY is the call's replay kind (`unsafe` or `idempotent`). The worker admits call 0 of
THREAD on PostgreSQL, prints `claimed` once its claim is stored, and sleeps (its tool body
"runs") until the test kills it.

With EFFECTS, BARRIER and N it races instead: once N workers marked themselves ready in the
folder BARRIER it admits the call (pauses of 3 s: a lost wake-up shows), appends its pid to
EFFECTS when told to run it, records the outcome, and prints one JSON line: its answer and
the wall-clock time it had it (or recorded the outcome).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langgraph.store.postgres import PostgresStore

from langgraph_replay_guard.replay import ledger, owners
from langgraph_replay_guard.replay.ledger import Write, admit, finished_entry
from langgraph_replay_guard.storage.ledger_io import run_plan
from tests.integration.proc_one_trip import context


def _race(store: PostgresStore, ctx: object, effects: str, barrier: str, workers: int) -> None:
    ledger.FIRST_PAUSE = ledger.LONGEST_PAUSE = 3.0
    (Path(barrier) / str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while len(list(Path(barrier).iterdir())) < workers:
        assert time.monotonic() < deadline, "the other workers never came"
        time.sleep(0.002)
    admission = run_plan(store, admit(ctx))  # type: ignore[arg-type]
    if admission.kind == "run":
        assert admission.entry is not None
        with open(effects, "a", encoding="utf-8") as file:
            file.write(f"{os.getpid()}\n")
        done = finished_entry(admission.entry, "sent", None, "success")
        run_plan(store, _record(ctx, done))
        owners.REGISTRY.release(admission.entry.owner)
    print(json.dumps({"kind": admission.kind, "at": time.time()}), flush=True)


def _record(ctx: object, done: object) -> object:
    yield Write(((ctx.rows_ns, done.key, done.to_value()),))  # type: ignore[attr-defined]


def main(argv: list[str]) -> None:
    uri, thread, replay, *race = argv
    ctx = dataclasses.replace(context(thread, 0), replay=replay)
    if race:
        with PostgresStore.from_conn_string(uri) as store:
            _race(store, ctx, race[0], race[1], int(race[2]))
        return
    with PostgresStore.from_conn_string(uri) as store:
        admission = run_plan(store, admit(ctx))
        assert admission.kind == "run", admission
        print("claimed", flush=True)
        time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1:])
