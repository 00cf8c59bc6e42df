"""Median cost of deciding and recording one call, with 10, 1,000 and 100,000 earlier calls.

Run: python benchmarks/bench_engine.py
Goal (DESIGN.md): a few microseconds per call, and the 100,000 case within 1.3x of the 10 case
(the state is bounded, so the cost must not grow with the thread's length). Also the cost of a
failure's signature (the same-failure layer reads each error text): a 2,000-character text built
to make a pattern backtrack must cost about what any 2,000-character error does.
"""

from __future__ import annotations

import json
import statistics
import time

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.decisions.engine import call_facts, decide, fold_settings, make_event
from langgraph_replay_guard.decisions.failures import failure_signature
from langgraph_replay_guard.decisions.keys import call_key
from langgraph_replay_guard.decisions.state import fold_events

ARGS = {
    "customer_id": "C1001",
    "line_id": "L1002",
    "query": "data usage for the current billing cycle",
    "filters": {"include_roaming": True, "period": "2026-11", "limit": 50},
    "request": 7,
}
CONFIG = GuardConfig(scope="thread", tools={"apply": "unsafe"})

# Error texts of 2,000 characters (what the signature reads of any longer one): an ordinary one,
# and runs that made the path and id patterns read from each character to the run's end.
FAILURES = {
    "a stack trace": (
        'Traceback (most recent call last):\n  File "/app/src/run.py", line 12, in main\n' * 40
    )[:2_000],
    "one 2,000-character token": "Q" * 2_000,
    "hyphenated words, no digit": "ab-" * 667,
    "a path, then 2,000 tildes": "x/" + "~" * 1_998,
}


def _args(i: int) -> dict[str, object]:
    return {**ARGS, "request": i}


def _prefill(n: int):  # type: ignore[no-untyped-def]
    ctl = ReplayGuard(CONFIG).control()
    for i in range(n):
        name = "apply" if i % 7 == 0 else "lookup"
        ctl.record_success(name, _args(i % 5000), result=f"result {i % 13}")
    return ctl


def _median_ns(fn, rounds: int = 15, per_round: int = 400) -> float:  # type: ignore[no-untyped-def]
    samples = []
    for r in range(rounds):
        start = time.perf_counter_ns()
        for i in range(per_round):
            fn(r * per_round + i)
        samples.append((time.perf_counter_ns() - start) / per_round)
    return statistics.median(samples)


def main() -> None:
    print(f"argument size: {len(json.dumps(ARGS))} bytes of JSON")
    key_ns = _median_ns(lambda i: call_key("lookup", _args(i)))
    print(f"call key (canonical JSON + xxh3_128): {key_ns / 1000:.2f} us")
    print()
    print(
        f"{'earlier calls':>14} {'engine (us)':>12} {'vs 10':>6} "
        f"{'control API (us)':>17} {'vs 10':>6} {'state (bytes)':>14}"
    )
    settings = fold_settings(CONFIG)
    base_engine = base_control = None
    for n in (10, 1_000, 100_000):
        ctl = _prefill(n)
        state = ctl._state

        def engine_step(i: int, state=state) -> None:  # type: ignore[no-untyped-def]
            # What the integrations do: one key, one decision, one recorded event.
            facts = call_facts(CONFIG, "lookup", _args(10_000 + i))
            decide(state, facts, CONFIG)
            event = make_event(facts, "success", result="result")
            fold_events(state, [event], settings)

        def control_step(i: int, ctl=ctl) -> None:  # type: ignore[no-untyped-def]
            # The seed vocabulary: evaluate and record are separate calls, each keys the call.
            args = _args(20_000 + i)
            ctl.evaluate("lookup", args)
            ctl.record_success("lookup", args, result="result")

        engine = _median_ns(engine_step)
        control = _median_ns(control_step)
        base_engine = base_engine or engine
        base_control = base_control or control
        size = len(json.dumps(ctl._state))
        print(
            f"{n:>14,} {engine / 1000:>12.2f} {engine / base_engine:>5.2f}x "
            f"{control / 1000:>17.2f} {control / base_control:>5.2f}x {size:>14,}"
        )
    print()
    print(f"{'failure signature of':>30} {'us':>10} {'vs a stack trace':>17}")
    base_failure = None
    for label, text in FAILURES.items():
        cost = _median_ns(lambda i, text=text: failure_signature(text), rounds=7, per_round=20)
        base_failure = base_failure or cost
        print(f"{label:>30} {cost / 1000:>10.1f} {cost / base_failure:>16.2f}x")


if __name__ == "__main__":
    main()
