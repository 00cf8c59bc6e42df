"""A guard channel value stored by an earlier release (format 1) is migrated, never reset.

Format 1 named the dedup window `window`, the repeat counters `counts` and the thread totals
`stats`; format 2 names them as `GuardView` does. `tests/fixtures/guard_state_v1.json` is a
value written by the code before format 2 (commit 073dea6) after these calls in turn `h1`:
`read(1)` ok, `write(7)` ok (a new epoch), `read(1)` ok, `read(1)` denied twice as a
duplicate, and `read(2)` as the first of a two-call batch `ai-3` (still pending).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from langgraph_replay_guard import GuardView
from langgraph_replay_guard.decisions.engine import call_facts
from langgraph_replay_guard.decisions.state import (
    FORMAT_VERSION,
    load_state,
    merge_guard_state,
    settled,
)
from langgraph_replay_guard.decisions.state_format import V1_RENAMED, FoldSettings, migrate
from tests.unit.test_corrupt_state import BASES, CONFIG, event, write

V1_VALUE: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "guard_state_v1.json").read_text(encoding="utf-8")
)


def same_calls_now() -> dict[str, Any]:
    """The fixture's calls, recorded by this release."""
    value: dict[str, Any] = {}
    value = write(value, event("read", 1))
    value = write(value, event("write", 7))
    value = write(value, event("read", 1, result="same"))
    value = write(value, event("read", 1, "denied", reason="duplicate"))
    value = write(value, event("read", 1, "denied", reason="duplicate"))
    return write(value, event("read", 2, batch="ai-3", index=0, batch_size=2))


def as_v1(value: dict[str, Any]) -> dict[str, Any]:
    """A current value as format 1 stored it."""
    old_names = {new: old for old, new in V1_RENAMED.items()}
    v1 = {old_names.get(key, key): copy.deepcopy(item) for key, item in value.items()}
    v1["v"] = 1
    log = v1.pop("log")  # formats 1 and 2 kept the batch in progress as `pending`
    v1["pending"] = {"batch": log[0]["b"], "events": log} if log else None
    return v1


def test_the_fixture_is_in_format_1():
    assert FORMAT_VERSION == 3
    assert V1_VALUE["v"] == 1
    assert {"window", "counts", "stats"} <= V1_VALUE.keys()
    assert not {"recent_calls", "counters", "totals"} & V1_VALUE.keys()


def test_a_v1_value_migrates_with_nothing_lost():
    state = load_state(copy.deepcopy(V1_VALUE))
    assert state["v"] == FORMAT_VERSION
    assert state["reset"] is None, "migrated, not reset"
    assert state["notice"] is None
    assert state["recent_calls"] == V1_VALUE["window"]
    assert state["counters"] == V1_VALUE["counts"]
    assert state["totals"] == V1_VALUE["stats"]
    for key in V1_VALUE.keys() - V1_RENAMED.keys() - {"v", "pending", "cfg"}:
        assert state[key] == V1_VALUE[key], key
    # The settings, all written by that release, read as this one writes them: the defaults
    # are not stored.
    assert FoldSettings.decode(state["cfg"]) == FoldSettings.decode(V1_VALUE["cfg"])
    # Exactly the value this release writes after the same calls.
    assert state == same_calls_now()


def test_migrate_renames_three_keys_and_leaves_a_current_value_alone():
    migrated = migrate(V1_VALUE)
    assert migrated["v"] == 3
    renamed = {**V1_RENAMED, "pending": "log"}
    assert set(migrated) == {renamed.get(key, key) for key in V1_VALUE}
    current = same_calls_now()
    assert migrate(current) is current


def test_a_v1_value_keeps_counting_and_blocks_the_next_repeat():
    repeat = event("read", 1, "denied", reason="duplicate", batch="ai-4", index=0, batch_size=1)
    after = write(copy.deepcopy(V1_VALUE), repeat)
    assert after == write(same_calls_now(), repeat)
    key = call_facts(CONFIG, "read", {"id": 1}).key
    assert after["counters"][key] == [4, "read"], "the count goes on from the stored 3"
    assert after["totals"] == {"calls": 7, "blocked": 3, "aborts": 0}


@pytest.mark.parametrize("read", ["reducer", "settled", "view"])
def test_every_read_path_migrates(read):
    value = copy.deepcopy(V1_VALUE)
    if read == "reducer":  # a whole state written with update_state
        state: Any = merge_guard_state(None, value)
    elif read == "settled":
        state = settled(value)
    else:
        view = GuardView.from_state(value, None)
        assert (view.totals.calls, view.totals.blocked, view.totals.aborts) == (6, 2, 0)
        # The pending batch's read(2) is folded in: a distinct call, counted once.
        assert [(c.tool, c.count) for c in view.counters] == [
            ("write", 1),
            ("read", 3),
            ("read", 1),
        ]
        assert view.reset is None
        return
    assert state["reset"] is None
    assert state["totals"]["calls"] >= V1_VALUE["stats"]["calls"]


@pytest.mark.parametrize("name", list(BASES))
def test_each_kind_of_value_round_trips_through_format_1(name):
    base = BASES[name]
    assert load_state(as_v1(base)) == load_state(base)


def test_a_corrupt_v1_value_still_resets_and_keeps_its_totals(caplog):
    value = copy.deepcopy(V1_VALUE)
    value["window"] = [["k"]]
    with caplog.at_level("WARNING", logger="langgraph_replay_guard"):
        state = load_state(value)
    assert state["reset"] is not None
    assert "recent_calls[0]" in state["reset"]["reason"]
    assert "format 1" in state["reset"]["reason"]
    assert state["notice"] is not None
    assert state["counters"] == {}
    assert state["totals"] == V1_VALUE["stats"], "the thread totals survive the reset"
    assert len(caplog.records) == 1


@pytest.mark.parametrize("version", [0, 4, "1", True, None])
def test_an_unknown_format_version_still_resets(version):
    value = copy.deepcopy(V1_VALUE)
    value["v"] = version
    state = load_state(value)
    assert state["reset"] is not None
    assert "format version" in state["reset"]["reason"]
    assert state["counters"] == {}


def test_a_format_2_batch_in_progress_joins_the_log_and_completes():
    # Format 2 (the release before format 3) kept the batch in progress as `pending`.
    now = same_calls_now()
    v2 = {k: copy.deepcopy(item) for k, item in now.items() if k != "log"}
    v2["v"] = 2
    v2["pending"] = {"batch": "ai-3", "events": copy.deepcopy(now["log"])}
    assert load_state(v2) == now, "the pending batch is the log, nothing reset"
    second = event("read", 3, batch="ai-3", index=1, batch_size=2)
    after = write(v2, second)
    assert after == write(now, second)
    assert after["log"] == [], "the batch is complete: folded"
    assert after["totals"]["calls"] == now["totals"]["calls"] + 2
