"""Issue 37's channel format readers, attacked with hostile stored values.

The promise of the smaller state machine: any stored value (old, corrupt, hostile) reads as a
valid state or resets with a notice naming the problem, never a crash, never a silently wrong
counter that lets a loop run past its stop. Every field of `state_format.FIELDS` (and `cfg`,
`v`, format 2's `pending`) is mutated (wrong type, negative, zero, huge, NaN, a boolean,
nested past the recursion limit, rows a position short or long, unknown and missing keys),
on valid values in formats 3 and 2, and read through every reader: `load_state`, `settled`,
`state_view`, `guard.inspect`, `guard.system_prompt`, the reducer (a whole state, a guard
write, a preview scrub and show), the batch readers and `preview_facts`. Then the same read
is repeated from that value: the loop must stop by the call a reset state stops it at.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import sys
from typing import Any

import pytest

from langgraph_replay_guard import LoopAbortedError, ReplayGuard
from langgraph_replay_guard.decisions.engine import (
    Verdict,
    call_facts,
    decide_calls,
    earlier_call_id,
    fold_settings,
    make_event,
    state_view,
)
from langgraph_replay_guard.decisions.state import (
    batch_in_progress,
    delivered,
    load_state,
    merge_guard_state,
    own_update,
    preview_facts,
    scrub_update,
    settled,
    show_update,
    unrecorded_positions,
)
from langgraph_replay_guard.decisions.state_format import FIELDS
from tests.channel_formats import as_v2
from tests.unit.test_corrupt_state import BASES, CONFIG, event, write

LIMIT = CONFIG.max_repeats + 1
"""The call of a read repeated from a new state that the repeat limit stops (the 4th)."""

READ_KEY = call_facts(CONFIG, "read", {"id": 1}).key


def deep(depth: int) -> list[Any]:
    """A list nested `depth` levels deep."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


PAST_THE_LIMIT = sys.getrecursionlimit() + 100


def loop_stops_at(value: Any, calls: int = 12) -> int | None:
    """The call of `read(1)`, repeated from `value` (turn h1), at which the guard stops the run."""
    for n in range(1, calls + 1):
        batch = f"loop-{n}"
        planned = decide_calls(
            CONFIG,
            settled(value),
            [{"name": "read", "args": {"id": 1}, "id": f"c{n}"}],
            "h1",
            batch_id=batch,
        )[0]
        decision = planned.decision
        assert decision is not None
        assert planned.facts is not None
        if decision.verdict is Verdict.ABORT:
            return n
        where: dict[str, Any] = {"batch": batch, "index": 0, "turn": "h1", "batch_size": 1}
        if decision.executes:
            ev = make_event(planned.facts, "success", result=f"fresh {n}", **where)
        else:
            ev = make_event(planned.facts, "denied", reason=decision.reason, **where)
        # Read back from a checkpoint: a new object, checked like any write.
        update = json.loads(json.dumps(own_update(fold_settings(CONFIG), [ev])))
        value = merge_guard_state(value, update)
    return None


def read_everywhere(value: Any) -> dict[str, Any]:
    """Every reader of a channel value; raises what any of them raises."""
    guard = ReplayGuard(CONFIG)
    state = load_state(value)
    settled(value)
    state_view(value)
    guard.inspect({"replay_guard": value})
    with contextlib.suppress(LoopAbortedError):  # by design: a stopped run came back
        guard.system_prompt({"replay_guard": value})
    merge_guard_state(None, value)
    merge_guard_state(value, scrub_update(["result 1"]))
    merge_guard_state(value, show_update({"digest": "preview"}))
    batch_in_progress(value)
    unrecorded_positions(value, "ai-9", 3)
    delivered(value, "ai-9")
    preview_facts(value)
    return state


def assert_read_or_reset(value: Any, field: str) -> None:
    """`value` reads as a valid state or resets naming `field`; its loop still stops."""
    state = read_everywhere(value)
    if state["reset"] is not None:
        reason = state["reset"]["reason"]
        assert state["notice"] is not None
        assert reason in state["notice"]
        named = f" {field}" in reason or f" {field}." in reason or f" {field}[" in reason
        version = field == "v" and "format version" in reason
        assert named or version, f"the notice names {field}: {reason}"
        assert state["counters"] == {}
    stops = loop_stops_at(value)
    assert stops is not None, "the loop never stopped"
    assert stops <= LIMIT, f"stopped at call {stops}"


def mutations(current: Any) -> dict[str, Any]:
    """Hostile replacements of one stored field, `current` being its valid value."""
    out: dict[str, Any] = {
        "null": None,
        "int": 7,
        "negative": -1,
        "huge": 10**40,
        "nan": math.nan,
        "inf": math.inf,
        "text": "x",
        "true": True,
        "list": [],
        "object": {},
        "float": 1.5,
        "deep": deep(PAST_THE_LIMIT),
        "deep list": [deep(PAST_THE_LIMIT)],
        "deep object": {"k": deep(PAST_THE_LIMIT)},
    }
    rows: list[tuple[str, list[Any], Any]] = []
    if isinstance(current, list) and current:
        last = current[-1]
        out["repeated"] = [*current, last]
        out["reversed"] = current[::-1]
        if isinstance(last, list):
            rows = [(name, row, None) for name, row in _rows(last)]
        if isinstance(last, dict):
            for name, entry in _entries(last):
                out[name] = [*current[:-1], entry]
        for name, row, _ in rows:
            out[name] = [*current[:-1], row]
    if isinstance(current, dict) and current:
        key, last = list(current.items())[-1]
        out["unknown key"] = {**current, "zz": 1}
        out["missing key"] = dict(list(current.items())[:-1])
        out["key not a string"] = {**current, 5: last}
        if isinstance(last, list):
            for name, row in _rows(last):
                out[name] = {**current, key: row}
            out["300 entries"] = {**{f"k{i}": last for i in range(300)}, **current}
        for name, entry in _entries(current):
            out[name] = entry
    return out


def _rows(row: list[Any]) -> list[tuple[str, list[Any]]]:
    """A stored row one position short, one or two long, and its numbers bent."""
    bent = {
        "numbers negative": -5,
        "numbers zero": 0,
        "numbers nan": math.nan,
        "numbers true": True,
        "numbers huge": 10**30,
    }
    return [
        ("row short", row[:-1]),
        ("row long", [*row, None]),
        ("row two long", [*row, "x", "y"]),
        ("row deep", [*row[:-1], deep(PAST_THE_LIMIT)]),
        *[(name, [n if type(x) is int else x for x in row]) for name, n in bent.items()],
    ]


def _entries(entry: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """An object with one key too many, one too few, and each whole number bent."""
    out = [
        ("entry extra key", {**entry, "zz": 1}),
        ("entry missing key", dict(list(entry.items())[1:])),
    ]
    for key, item in entry.items():
        if type(item) is int:
            out += [
                (f"{key} negative", {**entry, key: -3}),
                (f"{key} huge", {**entry, key: 10**30}),
            ]
            out += [(f"{key} true", {**entry, key: True}), (f"{key} nan", {**entry, key: math.nan})]
    return out


HOSTILE_BASES = ["full", "stopped", "pending", "ran_changed"]


@pytest.mark.parametrize(
    ("field", "form"),
    [
        (field, form)
        for field in [*FIELDS, "cfg"]
        for form in ["format 3", "format 2"]
        # Format 2 has no log (its `pending` has a test of its own).
        if not (field == "log" and form == "format 2")
    ],
)
def test_every_field_mutated_reads_or_resets_naming_it_and_the_loop_still_stops(field, form):
    checked = 0
    for base_name in HOSTILE_BASES:
        base = BASES[base_name] if form == "format 3" else as_v2(BASES[base_name])
        for name, replacement in {**mutations(base.get(field)), "absent": ...}.items():
            value = {k: v for k, v in copy.deepcopy(base).items() if k != field}
            if replacement is not ...:
                value[field] = copy.deepcopy(replacement) if "deep" not in name else replacement
            try:
                assert_read_or_reset(value, field)
            except BaseException as exc:
                msg = f"{base_name}, {form}, {field} {name}: {type(exc).__name__}: {exc}"
                raise AssertionError(msg[:400]) from None
            checked += 1
    assert checked >= 10


# -- what broke: each fails on c9cb1d9 -----------------------------------------------------------

COUNT_BELOW = {
    "counter -100": ("counters", lambda v: {**v["counters"], READ_KEY: [-100, "read"]}),
    "counter 0": ("counters", lambda v: {**v["counters"], READ_KEY: [0, "read"]}),
    "same in a row -5": (
        "results",
        lambda v: {**v["results"], READ_KEY: [v["results"][READ_KEY][0], 0, -5, "p"]},
    ),
    "result epoch -1": (
        "results",
        lambda v: {**v["results"], READ_KEY: [v["results"][READ_KEY][0], -1, 1, "p"]},
    ),
    "recent epoch -1": ("recent_calls", lambda v: [[*v["recent_calls"][0][:3], -1]]),
    "blocked count -1": ("blocked", lambda v: [["read", "duplicate", -1]]),
    "blocked count 0": ("blocked", lambda v: [["read", "duplicate", 0]]),
}


def one_read() -> dict[str, Any]:
    return write(None, event("read", 1))


@pytest.mark.parametrize("case", list(COUNT_BELOW))
@pytest.mark.parametrize("form", ["format 3", "format 2"])
def test_a_stored_count_the_fold_never_writes_resets_naming_it(case, form):
    """A repeat count of -100 read as valid let a repeated read run past its stop (the loop
    never stopped); every count the fold writes is >= 1 and every epoch >= 0."""
    field, bend = COUNT_BELOW[case]
    value = one_read()
    value[field] = bend(value)
    if form == "format 2":
        value = as_v2(value)
    state = load_state(copy.deepcopy(value))
    assert state["reset"] is not None, "a count the fold never writes is not a valid state"
    assert f"{field}" in state["reset"]["reason"]
    stops = loop_stops_at(copy.deepcopy(value))
    assert stops is not None
    assert stops <= LIMIT


def test_a_negative_repeat_count_does_not_let_the_loop_run_on():
    value = one_read()
    assert loop_stops_at(copy.deepcopy(value)) == LIMIT - 1  # the read ran once already
    value["counters"] = {READ_KEY: [-100, "read"]}
    assert loop_stops_at(value) == LIMIT, "reset: counted again from zero, stopped at the 4th"


@pytest.mark.parametrize(
    "where",
    ["turn", "epoch", "counters", "results", "log", "cfg", "totals", "pending", "write events"],
)
def test_a_value_nested_past_the_recursion_limit_resets_instead_of_raising(where):
    """The notice showed the bad value with `repr`: a value nested ~1000 deep (an
    `update_state` from code) raised RecursionError from every reader and the reducer."""
    nested = deep(PAST_THE_LIMIT)
    value: Any = copy.deepcopy(BASES["pending"])
    if where == "write events":
        state = merge_guard_state(value, {"op": "events", "events": [nested]})
        assert state["notice"] is not None
        assert "events[0]" in state["notice"]
        return
    if where == "pending":
        value = as_v2(value)
        value["pending"] = {"batch": "ai-9", "events": [nested]}
    elif where == "log":
        value["log"] = [{**value["log"][0], "a": nested}]
    elif where == "counters":
        value["counters"] = {READ_KEY: [nested, "read"]}
    else:
        value[where] = nested
    state = read_everywhere(value)
    assert state["reset"] is not None
    assert where in state["reset"]["reason"]
    assert "[[[[" in state["reset"]["reason"], "the value is shown, a few levels deep"
    assert loop_stops_at(value) == LIMIT


PENDING_SHAPES: dict[str, Any] = {
    "an empty object": {},
    "no events": {"batch": "ai-9"},
    "a batch that is a number": {"batch": 5, "events": "EVENTS"},
    "an unknown key": {"batch": "ai-9", "events": "EVENTS", "zz": 1},
    "events that are null": {"batch": "ai-9", "events": None},
    "a list": "EVENTS",
    "a string": "x",
    "zero": 0,
    "false": False,
}


@pytest.mark.parametrize("shape", list(PENDING_SHAPES))
def test_a_format_2_pending_of_another_shape_resets_naming_pending(shape):
    """Format 2 always wrote `pending` as null or `{"batch", "events"}`; another shape was
    read as no batch in progress (its events silently dropped) or named `log`, a field a
    format 2 value does not have."""
    base = as_v2(BASES["pending"])
    events = base["pending"]["events"]
    pending = PENDING_SHAPES[shape]
    if pending == "EVENTS":
        pending = events
    elif isinstance(pending, dict):
        pending = {k: events if v == "EVENTS" else v for k, v in pending.items()}
    value = {**base, "pending": pending}
    state = read_everywhere(value)
    assert state["reset"] is not None
    assert "pending" in state["reset"]["reason"]
    assert "format 2" in state["reset"]["reason"]
    assert loop_stops_at(value) is not None


def test_a_format_2_pending_as_written_still_joins_the_log():
    base = BASES["pending"]
    assert load_state(as_v2(base)) == load_state(base)
    empty = {**as_v2(base), "pending": {"batch": "ai-9", "events": []}}
    assert load_state(empty)["reset"] is None


@pytest.mark.parametrize("version", [1, 4, "3", "2", True, False, 3.0, 2.5, None, -1, [3]])
def test_a_version_other_than_2_or_3_resets_naming_it(version):
    value = {**copy.deepcopy(BASES["full"]), "v": version}
    state = read_everywhere(value)
    assert state["reset"] is not None
    assert "format version" in state["reset"]["reason"]
    assert state["totals"] == {"calls": 0, "blocked": 0, "aborts": 0} or version in (2, 3)
    assert loop_stops_at(value) == LIMIT


@pytest.mark.parametrize(
    ("cfg", "named"),
    [
        ({"w": 0}, "cfg.w"),
        ({"w": 10**9}, "cfg.w"),
        ({"w": True}, "cfg.w"),
        ({"cp": 1}, "cfg.cp"),
        ({"cp": 33}, "cfg.cp"),
        ({"scope": "run"}, "cfg.scope"),
        ({"rr": "never"}, "cfg.rr"),
        ({"rd": 1}, "cfg.rd"),
        ({"zz": 1}, "cfg.zz"),
        ([], "cfg"),
    ],
)
def test_stored_settings_out_of_range_reset_naming_them(cfg, named):
    value = {**copy.deepcopy(BASES["pending"]), "cfg": cfg}
    state = read_everywhere(value)
    assert state["reset"] is not None
    assert f"{named} should be" in state["reset"]["reason"]
    # And in a write: ignored with a notice, the state kept.
    before = load_state(BASES["pending"])
    after = merge_guard_state(
        copy.deepcopy(BASES["pending"]), {"op": "events", "cfg": cfg, "events": []}
    )
    assert after["notice"] is not None
    assert named in after["notice"]
    assert after["counters"] == before["counters"]


def test_a_result_memo_of_four_entries_reads_as_one_without_a_call_id():
    """Positional reads: `earlier_call_id` reads a memo's fifth entry only when it has one."""
    value = copy.deepcopy(BASES["ran_changed"])
    key = next(reversed(value["results"]))
    assert earlier_call_id(settled(value), key) == "call-200"
    # Edited as a checkpoint would hold it: new objects (the readers remember values by
    # identity, and nothing edits a stored value in place).
    value = copy.deepcopy(
        {**value, "results": {**value["results"], key: value["results"][key][:4]}}
    )
    assert load_state(value)["reset"] is None
    assert earlier_call_id(settled(value), key) is None
    shown = merge_guard_state(value, show_update({value["results"][key][0]: "p"}))
    assert len(shown["results"][key]) == 4
    # A position short: reset, never a read of row[3].
    value = copy.deepcopy(
        {**value, "results": {**value["results"], key: value["results"][key][:3]}}
    )
    state = read_everywhere(value)
    assert state["reset"] is not None
    assert "results[" in state["reset"]["reason"]


def hostile_writes() -> dict[str, Any]:
    """Writes to the channel that the guard never builds (a node's or `update_state`'s)."""
    ev = event("read", 1, batch="ai-1", index=0, batch_size=2)
    writes: dict[str, Any] = {}
    for name, entry in _entries(dict(ev)):
        writes[f"an event with {name}"] = {"op": "events", "events": [entry]}
    for name, events in mutations([ev]).items():
        writes[f"events {name}"] = {"op": "events", "events": events}
    for name, cfg in mutations({}).items():
        writes[f"cfg {name}"] = {"op": "events", "events": [ev], "cfg": cfg}
    writes["a format 2 seed"] = {**copy.deepcopy(BASES["full"]), "v": 2, "seed": [ev]}
    writes["a seed alone"] = {"seed": [ev], "cfg": {}}
    writes["another op"] = {"op": "zzz"}
    writes["a scrub of numbers"] = {"op": "scrub", "previews": [1]}
    writes["a show of NaN"] = {"op": "show", "previews": {"h": math.nan}}
    writes["a list"] = [ev]
    writes["a write with a version"] = {"op": "events", "events": [ev], "v": 3}
    return writes


@pytest.mark.parametrize("base", ["new", "full", "pending", "stopped"])
def test_hostile_writes_never_raise_and_the_loop_still_stops(base):
    for name, update in hostile_writes().items():
        try:
            value = merge_guard_state(copy.deepcopy(BASES[base]), update)
            read_everywhere(value)
            stops = loop_stops_at(value)
        except BaseException as exc:
            msg = f"{base}, {name}: {type(exc).__name__}: {exc}"
            raise AssertionError(msg[:400]) from None
        assert stops is not None, f"{base}, {name}: the loop never stopped"
        assert stops <= LIMIT, f"{base}, {name}: stopped at call {stops}"
