"""Cost of reading and reducing the guard channel, and of loading a hostile oversize value.

Run: python benchmarks/bench_state.py
The reducer (`merge_guard_state`) runs on every superstep that writes the channel and the read
paths (`settled`, `snapshot`) on every tool call and model call: both validate the whole value.
Rows are medians over rounds, on a full state (every capped map at its cap, a cycle, a
reminder, blocked calls, optionally a pending batch). "last output" is the value the reducer
returned last (what the next write and the reads of a running graph get); "from checkpoint" is a
copy of it, as a checkpointer gives it back at the start of a run, checked in full on every read.
Compare rows, not absolute numbers (a shared machine drifts).
The last rows load a channel whose `counters` map has 160,000 keys (what a hand edit or a bug
could store): it must be trimmed once, not evicted key by key. Then the channel's size after
10,000 calls (bytes of the stored JSON, mean over the run and at its end) and the reducer's
time per write; `bench_state.py TREE` adds the same row for the package in TREE (a checkout of
an earlier release), so that two formats show side by side in one run.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from langgraph_replay_guard.decisions.engine import call_facts, fold_settings, make_event
from langgraph_replay_guard.decisions.state import (
    MAX_TRACKED_KEYS,
    Event,
    load_state,
    merge_guard_state,
    settled,
)
from langgraph_replay_guard.integrations.calls import snapshot
from langgraph_replay_guard.policy.config import GuardConfig

CONFIG = GuardConfig(scope="thread", tools={"write": "unsafe"})
CFG = fold_settings(CONFIG)


def _event(tool: str, arg: int, outcome: str = "success", **kwargs: Any) -> Event:
    result = kwargs.pop("result", f"result of {tool} {arg}")
    facts = call_facts(CONFIG, tool, {"id": arg, "query": "data usage this cycle"})
    return make_event(facts, outcome, result=result, turn="h1", **kwargs)  # type: ignore[arg-type]


def _update(*events: Event) -> dict[str, Any]:
    return {"op": "events", "cfg": CFG, "events": list(events)}


def full_state() -> dict[str, Any]:
    """A settled state with every capped map full, a cycle, a reminder and blocked calls."""
    value: dict[str, Any] = {}
    for i in range(60):  # distinct reads: counters and results reach their caps
        value = merge_guard_state(value, _update(_event("read", i)))
    for _ in range(3):  # an A-B-A-B pattern with identical results: a cycle and a reminder
        value = merge_guard_state(value, _update(_event("read", 1, result="same")))
        value = merge_guard_state(value, _update(_event("search", 2, result="same")))
    for i in range(5):
        denied = _event("read", 7, "denied", reason="duplicate")
        value = merge_guard_state(value, _update({**denied, "i": i}))
    assert len(value["counters"]) == MAX_TRACKED_KEYS
    return value


def with_pending(value: dict[str, Any]) -> dict[str, Any]:
    """The state with a batch of three calls, two of them reported."""
    for index in range(2):
        event = _event("read", 100 + index, batch="ai-9", index=index, batch_size=3)
        value = merge_guard_state(value, _update(event))
    assert value["log"], "the batch in progress waits in the log"
    return value


def _median_us(fn: Callable[[], object], rounds: int = 15, per_round: int = 2000) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        for _ in range(per_round):
            fn()
        samples.append((time.perf_counter_ns() - start) / per_round / 1000)
    return statistics.median(samples)


def main() -> None:
    value = full_state()
    pending = with_pending(value)
    # A value as a checkpoint gives it back: a new object, never returned by the reducer in
    # this process, so every read checks it in full.
    stored, stored_pending = copy.deepcopy(value), copy.deepcopy(pending)
    one = _update(_event("read", 5000))
    batch_write = _update(_event("read", 102, batch="ai-9", index=2, batch_size=3))
    chain = [value]

    def chained() -> None:
        # What a running graph does: each write reduces the value the last write produced.
        chain[0] = merge_guard_state(chain[0], one)

    def read_last() -> None:
        settled(chain[0])

    rows = [
        ("reducer: one event, current = last output", chained),
        ("settled: the last output", read_last),
        ("reducer: one event, current from checkpoint", lambda: merge_guard_state(stored, one)),
        (
            "reducer: last call of a batch, from checkpoint",
            lambda: merge_guard_state(stored_pending, batch_write),
        ),
        ("load_state: from checkpoint", lambda: load_state(stored)),
        # A checkpoint value is checked once per object (`state._KNOWN`): the row above reads
        # the same object again; this one reads a new object each time, as a new run does.
        ("load_state: a new checkpoint object each read", lambda: load_state(dict(stored))),
        ("settled: from checkpoint", lambda: settled(stored)),
        ("snapshot: pending batch, from checkpoint", lambda: snapshot(stored_pending, "ai-9")),
    ]
    print(f"{'what':<48} {'median (us)':>12}")
    for label, fn in rows:
        print(f"{label:<48} {_median_us(fn):>12.2f}")

    hostile = dict(value)
    hostile["counters"] = {f"key-{i}": [1, "read"] for i in range(160_000)}
    start = time.perf_counter()
    after = merge_guard_state(hostile, one)
    elapsed = time.perf_counter() - start
    print(
        f"\n160,000-key counters + one event: {elapsed * 1000:.1f} ms once "
        f"(counters now {len(after['counters'])} keys)"
    )
    start = time.perf_counter()
    merge_guard_state(after, one)
    print(f"the next event on the trimmed value: {(time.perf_counter() - start) * 1e6:.1f} us")


def _calls(count: int) -> list[list[Event]]:
    """`count` calls as an agent makes them: batches of one to three parallel calls, a few
    repeats, failures and blocked calls, a new user turn now and then."""
    writes: list[list[Event]] = []
    turn, step = "h0", 0
    while sum(map(len, writes)) < count:
        step += 1
        turn = f"h{step}" if step % 50 == 0 else turn
        size = 1 + step % 3
        batch = f"ai-{step}"
        for index in range(size):
            arg = (step * 7 + index) % 40
            outcome = "failure" if step % 11 == 0 else "success"
            event = _event("read" if index else "write", arg, outcome, batch=batch, index=index)
            writes.append([{**event, "t": turn, "m": size}])
    return writes


def sizes(count: int = 10_000) -> None:
    """Channel bytes (stored JSON, mean over the run and at its end) and reducer time per
    write after `count` calls, in the format the imported package writes."""
    writes = _calls(count)
    value: Any = None
    seen, start = [], time.perf_counter()
    for events in writes:
        value = merge_guard_state(value, _update(*events))
        seen.append(len(json.dumps(value)))
    per = (time.perf_counter() - start) / len(writes) * 1e6
    print(
        f"format {value['v']} after {len(writes)} calls: mean {sum(seen) // len(seen)} bytes, "
        f"last {seen[-1]} bytes, {per:.0f} us/write (json.dumps included)"
    )


if __name__ == "__main__":
    # `bench_state.py [TREE...]`: then the channel sizes of the package in each TREE (a
    # checkout of another release: format 2 beside format 3 in one run).
    if sys.argv[1:] == ["--sizes"]:
        sizes()
    else:
        main()
        sizes()
        for tree in sys.argv[1:]:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.getcwd()])}
            subprocess.run([sys.executable, __file__, "--sizes"], env=env, check=True)
