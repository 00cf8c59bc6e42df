"""A worker or an operator in its own process, for the live-holder tests (issue 27).

Usage: python tests/integration/proc_lease.py ACTION KIND TARGET STORE_TARGET THREAD EFFECTS
    --seconds S --lease L --wait W [--go FILE] [--release FILE]
    [--tool-call-id ID --outcome O --result R]

ACTION `resume`: resume the thread (stopped before its tools node) with a `send_email` that
takes S seconds, the guard's `in_flight_lease` L and `in_flight_wait` W; with `--go`, wait
for that file first (imports done, graph built); with `--release`, the tool ends early once
that file exists. Prints one JSON line like `proc_claim.py`:
`ran`, `replayed`, `idle` or the error's class name (and `message`).

ACTION `resolve`: `guard.resolve(graph, config, ID, O, result=R, resume=False)`; prints
`resolved` or the error's class name and message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root

from langgraph_replay_guard import ReplayGuard
from tests.integration.claim_graphs import POLICY, claim_graph, effect_tools
from tests.integration.proc_claim import open_backend, resume_outcome


def _options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    for name in ("action", "kind", "target", "store_target", "thread", "effects"):
        parser.add_argument(name)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--lease", type=float, default=900.0)
    parser.add_argument("--wait", type=float, default=10.0)
    parser.add_argument("--go", default=None)
    parser.add_argument("--release", default=None)
    parser.add_argument("--tool-call-id", default=None)
    parser.add_argument("--outcome", default="retry")
    parser.add_argument("--result", default=None)
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    opts = _options(argv)
    config = {"configurable": {"thread_id": opts.thread}}
    policy = POLICY.model_copy(update={"in_flight_lease": opts.lease, "in_flight_wait": opts.wait})
    with open_backend(opts.kind, opts.target, opts.store_target) as (saver, store):
        guard = ReplayGuard(policy, store=store)
        release = Path(opts.release) if opts.release else None
        tools = effect_tools(Path(opts.effects), seconds=opts.seconds, release=release)
        graph = claim_graph("wrap", guard, tools, saver, store)
        try:
            if opts.action == "resolve":
                guard.resolve(
                    graph, config, opts.tool_call_id, opts.outcome, opts.result, resume=False
                )
                print(json.dumps({"outcome": "resolved"}))
                return
            if opts.go is not None:
                _wait_for(Path(opts.go))
            outcome = resume_outcome(graph, config)
        except Exception as exc:  # reported to the parent, which asserts on it
            print(json.dumps({"outcome": type(exc).__name__, "message": str(exc)}))
            return
    print(json.dumps({"outcome": outcome}))


def _wait_for(go: Path) -> None:
    deadline = time.monotonic() + 120
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


if __name__ == "__main__":
    main(sys.argv[1:])
