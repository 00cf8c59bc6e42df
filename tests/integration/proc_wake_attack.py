"""A worker that claims one call through the ledger's admit plan, then hangs (to be SIGKILLed).

Usage: python tests/integration/proc_wake_attack.py URI THREAD REPLAY

REPLAY is the call's replay kind (`unsafe` or `idempotent`). The worker admits call 0 of
THREAD on PostgreSQL, prints `claimed` once its claim is stored, and sleeps (its tool body
"runs") until the test kills it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langgraph.store.postgres import PostgresStore

from langgraph_replay_guard.replay.ledger import admit
from langgraph_replay_guard.storage.ledger_io import run_plan
from tests.integration.proc_one_trip import context


def main(argv: list[str]) -> None:
    uri, thread, replay = argv
    ctx = dataclasses.replace(context(thread, 0), replay=replay)
    with PostgresStore.from_conn_string(uri) as store:
        admission = run_plan(store, admit(ctx))
        assert admission.kind == "run", admission
        print("claimed", flush=True)
        time.sleep(600)


if __name__ == "__main__":
    main(sys.argv[1:])
