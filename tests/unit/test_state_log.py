"""Format 3 of the guard channel (a log beside a fold): the same decisions as format 2."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

from langgraph_replay_guard.decisions.engine import call_facts, fold_settings, make_event
from langgraph_replay_guard.decisions.state import merge_guard_state, settled
from langgraph_replay_guard.decisions.state_format import Event
from langgraph_replay_guard.decisions.state_log import LOG_CAP, derive, log_write, merge_log
from langgraph_replay_guard.policy.config import GuardConfig

CONFIG = GuardConfig(tools={"write": "unsafe"}, max_repeats=4)
CFG = fold_settings(CONFIG)
TOOLS = ("read", "search", "write")


def _event(rng: random.Random, turn: str, batch: str | None, index: int, size: int) -> Event:
    tool = rng.choice(TOOLS)
    facts = call_facts(CONFIG, tool, {"id": rng.randrange(4)})
    outcome = rng.choice(["success", "success", "success", "failure", "denied", "answered"])
    reason = rng.choice(["duplicate", "repeat_limit", "cycle"]) if outcome == "denied" else None
    return make_event(
        facts,
        outcome,  # type: ignore[arg-type]
        result=f"r{rng.randrange(3)}",
        reason=reason,
        abort=outcome == "denied" and rng.random() < 0.1,
        batch=batch,
        index=index,
        turn=turn,
        batch_size=size,
    )


def _writes(seed: int, steps: int) -> list[list[Event]]:
    """Writes as a graph makes them: batches of parallel calls, in any order, some twice."""
    rng = random.Random(seed)
    writes: list[list[Event]] = []
    turn = "h0"
    for step in range(steps):
        if rng.random() < 0.1:
            turn = f"h{step}"
        size = rng.choice([1, 1, 2, 3])
        batch = f"ai-{step}"
        events = [_event(rng, turn, batch, index, size) for index in range(size)]
        rng.shuffle(events)
        writes.extend([ev] for ev in events)
        if rng.random() < 0.2:
            writes.append([copy.deepcopy(rng.choice(events))])  # a late copy (a resume)
    return writes


def _format2(writes: list[list[Event]]) -> dict[str, Any]:
    value: Any = None
    for events in writes:
        value = merge_guard_state(value, {"op": "events", "cfg": CFG, "events": events})
    return dict(settled(value))


def _format3(writes: list[list[Event]], cap: int = LOG_CAP) -> dict[str, Any]:
    value: Any = None
    for number, events in enumerate(writes):
        write = log_write(events, CFG if number == 0 else None)
        # LangGraph stores the first write to an empty channel as it is, without the reducer.
        value = write if value is None else merge_log(value, write, cap=cap)
    return derive(value)


def _comparable(state: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in state.items() if k not in {"notice", "v"}}


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("cap", [0, 1, 16])
def test_format3_decides_on_the_state_format2_settles_to(seed: int, cap: int) -> None:
    writes = _writes(seed, 40)
    assert _comparable(_format3(writes, cap)) == _comparable(_format2(writes))


def test_the_first_write_stored_as_it_is_is_a_value() -> None:
    writes = _writes(1, 1)
    first = log_write(writes[0], CFG)
    assert derive(first)["totals"]["calls"] == 1


def test_parallel_writes_of_a_batch_give_one_value_in_any_order() -> None:
    rng = random.Random(3)
    events = [_event(rng, "h1", "ai-1", i, 3) for i in range(3)]
    values = set()
    for order in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        value: Any = log_write([events[order[0]]], CFG)
        for i in order[1:]:
            value = merge_log(value, log_write([events[i]]))
        values.add(json.dumps(derive(value), sort_keys=True))
    assert len(values) == 1


def test_a_format2_value_is_read_with_its_pending_batch() -> None:
    writes = _writes(5, 10)
    value: Any = None
    for events in writes:
        value = merge_guard_state(value, {"op": "events", "cfg": CFG, "events": events})
    assert _comparable(derive(copy.deepcopy(value))) == _comparable(dict(settled(value)))


def test_size_after_many_calls_is_bounded() -> None:
    writes = _writes(7, 600)
    value: Any = None
    for number, events in enumerate(writes):
        write = log_write(events, CFG if number == 0 else None)
        value = write if value is None else merge_log(value, write)
    assert len(value["log"]) <= LOG_CAP + 3
