"""A corrupt guard channel value never raises from any entry point; valid values are unchanged.

Property: random mutations of valid channel values (keys deleted, values replaced by random
JSON of another type, lists and strings truncated, junk added, numbers out of range) go
through the reducer, `load_state`, `settled`, `GuardView.from_state`, `guard.inspect`,
`guard.system_prompt`, the router, the turn lookup, the decision for a batch (`snapshot` +
`decide_batch`) and the callback handler's scope state, and none of them raises. Oversize maps
are trimmed once on load.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from langgraph_replay_guard import (
    GUARD_CHANNEL,
    GuardConfig,
    GuardView,
    LoopAbortedError,
    ReplayGuard,
)
from langgraph_replay_guard.decisions.engine import call_facts, fold_settings, make_event
from langgraph_replay_guard.decisions.state import (
    MAX_BLOCKED_LOG,
    MAX_RESULTS,
    MAX_TRACKED_KEYS,
    Event,
    fold_events,
    load_state,
    merge_guard_state,
    new_state,
    settled,
)
from langgraph_replay_guard.integrations.batches import find_batch, turn_anchors
from langgraph_replay_guard.integrations.callbacks.decisions import CallbackDecider, Refusal
from langgraph_replay_guard.integrations.callbacks.scopes import ScopeTable
from langgraph_replay_guard.integrations.calls import decide_batch, snapshot
from tests.hypothesis_budget import examples

CONFIG = GuardConfig(tools={"write": "unsafe"})
CFG = fold_settings(CONFIG)
GUARD = ReplayGuard(CONFIG)


def event(tool: str, arg: int, outcome: str = "success", **kwargs: Any) -> Event:
    result = kwargs.pop("result", f"result {arg}")
    facts = call_facts(CONFIG, tool, {"id": arg})
    return make_event(facts, outcome, result=result, turn="h1", **kwargs)  # type: ignore[arg-type]


def write(value: Any, *events: Event) -> dict[str, Any]:
    return merge_guard_state(value, {"op": "events", "cfg": CFG, "events": list(events)})


def _bases() -> dict[str, dict[str, Any]]:
    """Valid channel values with every field in use: caps reached, a cycle, a stop, a batch."""
    full: dict[str, Any] = {}
    for i in range(40):  # counters and results at their caps
        full = write(full, event("read", i))
    for _ in range(3):  # identical results going round read -> search: a cycle and a reminder
        full = write(full, event("read", 1, result="same"))
        full = write(full, event("search", 2, result="same"))
    stopped = write(full, event("read", 1, "denied", reason="cycle", abort=True))
    pending = write(
        stopped,
        event("read", 100, batch="ai-9", index=0, batch_size=3),
        event("write", 101, batch="ai-9", index=1, batch_size=3),
    )
    was_reset = write(merge_guard_state(None, {"v": 0}), event("read", 5))
    # A call that ran changed by a middleware: its result memo names its tool_call_id.
    ran_changed = write(full, event("read", 200, call_id="call-200"))
    assert len(next(reversed(ran_changed["results"].values()))) == 5
    assert full["cycle"] is not None
    assert full["reminder"] is not None
    assert stopped["stop"] is not None
    assert pending["log"]
    assert was_reset["notice"] is not None
    return {
        "new": new_state(),
        "full": full,
        "stopped": stopped,
        "pending": pending,
        "was_reset": was_reset,
        "ran_changed": ran_changed,
    }


BASES = _bases()

# -- mutations -------------------------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-3, 10**12)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=6,
)
OPERATIONS = ["replace", "delete", "truncate", "add", "number", "text"]

Path = tuple[Any, ...]


def locations(value: Any, path: Path = ()) -> Iterator[Path]:
    """Every place in a JSON value: the root, each dict value and each list item."""
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from locations(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from locations(item, (*path, index))


def mutate(value: Any, draw: Callable[[st.SearchStrategy[Any]], Any]) -> Any:
    """Apply one random mutation to `value` (a private copy) and return the result."""
    path = draw(st.sampled_from(list(locations(value))))
    operation = draw(st.sampled_from(OPERATIONS))
    parent = value
    for step in path[:-1]:
        parent = parent[step]
    target = parent[path[-1]] if path else value
    new: Any
    if operation == "delete" and path:
        del parent[path[-1]]
        return value
    if operation == "truncate" and isinstance(target, list | dict | str) and target:
        keep = draw(st.integers(0, len(target) - 1))
        if isinstance(target, list):
            del target[keep:]
            return value
        if isinstance(target, dict):
            for key in list(target)[keep:]:
                del target[key]
            return value
        new = target[:keep]
    elif operation == "add" and isinstance(target, list | dict):
        junk = draw(json_values)
        if isinstance(target, list):
            target.append(junk)
        else:
            target[draw(st.text(max_size=4))] = junk
        return value
    elif operation == "number" and type(target) is int:
        new = draw(st.integers(-(10**6), 10**6))
    elif operation == "text" and isinstance(target, str):
        new = draw(st.text(max_size=12))
    else:  # replace, or an operation that does not apply here
        other_type = json_values.filter(lambda x: type(x) is not type(target))
        new = draw(other_type)
    if not path:
        return new
    parent[path[-1]] = new
    return value


@st.composite
def corrupt_values(draw: st.DrawFn) -> Any:
    value = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    for _ in range(draw(st.integers(1, 3))):
        value = mutate(value, draw)
    return value


# -- entry points ----------------------------------------------------------------------------

TOOL_CALLS = [
    {"name": "read", "args": {"id": 1}, "id": "c1", "type": "tool_call"},
    {"name": "write", "args": {"id": 101}, "id": "c2", "type": "tool_call"},
    {"name": "search", "args": {"id": 2}, "id": "c3", "type": "tool_call"},
]
MESSAGES = [HumanMessage("look it up", id="h1"), AIMessage("", id="ai-9", tool_calls=TOOL_CALLS)]


def assert_in_format(value: dict[str, Any]) -> None:
    """A value the guard wrote: plain JSON that reads back unchanged (no reset, no trim)."""
    assert json.loads(json.dumps(value)) == value
    assert load_state(json.loads(json.dumps(value))) == value
    assert len(value["counters"]) <= MAX_TRACKED_KEYS
    assert len(value["results"]) <= MAX_RESULTS
    assert len(value["blocked"]) <= MAX_BLOCKED_LOG


def exercise(value: Any) -> None:
    """Every entry point that reads the channel, on `value`."""
    update = {"op": "events", "cfg": CFG, "events": [event("read", 3)]}
    for written in (
        merge_guard_state(value, update),
        merge_guard_state(value, None),
        merge_guard_state(BASES["full"], value),
        load_state(value),
    ):
        assert_in_format(written)
    settled(value)
    GuardView.from_state(value, None)
    graph_state = {"messages": MESSAGES, GUARD_CHANNEL: value}
    for shown in (GUARD.inspect(value), GUARD.inspect(graph_state)):
        assert isinstance(shown, GuardView)
    assert GUARD.system_prompt(graph_state, "base").text.startswith("base")
    assert GUARD.route_after_tools("agent")(graph_state) in {"agent", "__end__"}
    batch = find_batch(graph_state, "c2", anchors=turn_anchors(value))
    assert batch is not None
    for batch_id in ("ai-9", "ai-other"):
        plan = decide_batch(CONFIG, snapshot(value, batch_id), batch)
        assert len(plan.calls) == len(TOOL_CALLS)
    exercise_callback_handler(value)


def exercise_callback_handler(value: Any) -> None:
    """The callback handler keeps the same value per thread (in memory or in a store)."""
    scopes = ScopeTable(4, None, ("ns",))
    scopes.get(("thread", "t")).value = value
    handler = CallbackDecider(CONFIG, scopes)
    key = ("thread", "t")
    assert isinstance(handler.view(key), GuardView)
    handler.reminder(key)
    handler.model_start(key, "h1")
    call = ("read", {"id": 3}, "c9")
    try:
        handler.batch(key, "ai-10", [call])
        admitted = handler.tool_start(key, call, fallback_id="ai-10", fallback_turn="h1")
    except LoopAbortedError:
        pass  # a stop in the (valid) state: the guard's answer, not a crash
    else:
        if not isinstance(admitted, Refusal):
            handler.record(admitted, "success", "a result")
    stored = scopes.get(key).value
    if stored is not value:  # the handler wrote (a refusal or a record)
        assert_in_format(stored)


@settings(max_examples=examples(300), deadline=None)
@given(corrupt_values())
def test_a_mutated_channel_value_never_raises_from_any_entry_point(value):
    exercise(value)


@settings(max_examples=examples(150), deadline=None)
@given(base=st.sampled_from(sorted(BASES)), data=st.data())
def test_a_malformed_write_is_ignored_and_the_state_kept(base, data):
    update = {"op": "events", "cfg": dict(CFG), "events": [event("read", 3)]}
    mutated = mutate(copy.deepcopy(update), data.draw)
    before = BASES[base]
    after = merge_guard_state(before, mutated)
    assert_in_format(after)
    if after["notice"] is not None and after["notice"].startswith("ignored a write"):
        assert {k: v for k, v in after.items() if k != "notice"} == {
            k: v for k, v in before.items() if k != "notice"
        }, "an ignored write leaves the state as it was"


@pytest.mark.parametrize("name", sorted(BASES))
def test_a_valid_value_reads_back_unchanged(name):
    value = BASES[name]
    stored = json.loads(json.dumps(value))  # what a checkpointer gives back
    assert load_state(stored) == value
    assert settled(stored) == settled(value)
    assert merge_guard_state(stored, None) == value


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("reminder", "boo"),
        ("log", [{}]),
        ("recent_calls", [["k"]]),
        ("stop", {"foo": 1}),
        ("cycle", {"keys": []}),
    ],
)
def test_each_known_corruption_resets_with_a_reason(field, bad, caplog):
    value = copy.deepcopy(BASES["pending"])
    value[field] = bad
    with caplog.at_level("WARNING", logger="langgraph_replay_guard"):
        state = load_state(value)
    assert state["reset"]["reason"].startswith(f"the guard channel is malformed: {field}")
    assert state["reset"]["at"].endswith("+00:00")
    assert state["totals"] == BASES["pending"]["totals"], "thread totals survive"
    assert state["counters"] == {}
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    # Every read of the same corrupt value gets the same reset, reported once.
    with caplog.at_level("WARNING", logger="langgraph_replay_guard"):
        assert settled(value)["reset"] == state["reset"]
        assert GuardView.from_state(value, None).reset == state["reset"]
    assert len(caplog.records) == 1
    exercise(value)


# -- oversize maps ---------------------------------------------------------------------------

HUGE = 160_000


def huge_value(field: str) -> dict[str, Any]:
    value = copy.deepcopy(BASES["full"])
    if field == "counters":
        value["counters"] = {f"key-{i}": [1, "read"] for i in range(HUGE)}
    elif field == "results":
        value["results"] = {f"key-{i}": ["hash", 0, 1, "preview"] for i in range(HUGE)}
    else:
        rows = {"recent_calls": ["k", "read", "success", 0], "blocked": ["read", "duplicate", 2]}
        row = rows[field]
        value[field] = [list(row) for _ in range(HUGE)]
    return value


@pytest.mark.parametrize("field", ["counters", "results", "recent_calls", "blocked"])
def test_an_oversize_map_is_trimmed_once_on_load_to_its_most_recent_entries(field):
    value = huge_value(field)
    state = load_state(value)
    caps = {"counters": MAX_TRACKED_KEYS, "results": MAX_RESULTS, "blocked": MAX_BLOCKED_LOG}
    cap = caps.get(field, CFG.get("w", GuardConfig().history_window))
    assert len(state[field]) == cap
    assert state["reset"] is None, "trimming is not a reset: the kept entries are valid"
    if isinstance(value[field], dict):
        assert list(state[field]) == list(value[field])[-cap:], "the most recent are kept"
    after = write(value, event("read", 7))
    assert len(after[field]) <= cap
    assert_in_format(after)


def test_an_event_on_a_huge_counters_map_evicts_in_constant_time():
    # The 160,000-key map a hand edit could store; the timing is in benchmarks/bench_state.py.
    value = huge_value("counters")
    after = write(value, event("read", 7))
    keys = list(after["counters"])
    assert len(keys) == MAX_TRACKED_KEYS
    assert keys[-1] == call_facts(CONFIG, "read", {"id": 7}).key, "the new call is the newest"
    assert keys[0] == f"key-{HUGE - MAX_TRACKED_KEYS + 1}", "only the oldest kept one went"
    # A state built by hand (not loaded) is trimmed by the fold itself, in one step.
    state = new_state()
    state["turn"] = "h1"  # the event's turn: entering a new turn would clear the map
    state["counters"] = huge_value("counters")["counters"]
    fold_events(state, [event("read", 8)], CFG)
    assert len(state["counters"]) == MAX_TRACKED_KEYS


def test_a_field_replaced_in_place_on_a_written_value_is_checked_again():
    # Values the reducer returned are read without a new check (every read of a step gets
    # the value the last write produced), unless one of their fields was replaced since.
    value = write(BASES["full"], event("read", 9))
    assert settled(value) is value
    value["reminder"] = "boo"
    state = settled(value)
    assert state["reset"]["reason"].startswith("the guard channel is malformed: reminder")
    assert GUARD.system_prompt({"messages": MESSAGES, GUARD_CHANNEL: value}, "base").text == "base"
