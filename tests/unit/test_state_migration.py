"""A guard channel value of the previous format (2) is read as format 3; format 1 resets.

Format 2 kept the batch in progress as `pending` (`{"batch", "events"}`); format 3 keeps its
events as `log`, and is otherwise the same. Format 1 (which named the dedup window `window`,
the repeat counters `counts` and the thread totals `stats`) was never in a release: such a value
resets with a notice, as any unknown format does. `tests/fixtures/guard_state_v1.json` is a
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
from tests.channel_formats import as_v2
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


def test_the_fixture_is_in_format_1():
    assert FORMAT_VERSION == 3
    assert V1_VALUE["v"] == 1
    assert {"window", "counts", "stats"} <= V1_VALUE.keys()


def test_a_format_1_value_resets_with_a_notice(caplog):
    with caplog.at_level("WARNING", logger="langgraph_replay_guard"):
        state = load_state(copy.deepcopy(V1_VALUE))
    assert state["reset"] is not None
    assert "format version 1" in state["reset"]["reason"]
    assert "reads versions 2, 3" in state["reset"]["reason"]
    assert state["notice"] is not None
    assert state["counters"] == {}
    assert len(caplog.records) == 1


def test_a_v2_value_reads_with_nothing_lost():
    now = same_calls_now()
    state = load_state(as_v2(now))
    assert state["reset"] is None, "read, not reset"
    assert state["notice"] is None
    assert state == now


def test_a_v2_value_keeps_counting_and_blocks_the_next_repeat():
    repeat = event("read", 1, "denied", reason="duplicate", batch="ai-4", index=0, batch_size=1)
    after = write(as_v2(same_calls_now()), repeat)
    assert after == write(same_calls_now(), repeat)
    key = call_facts(CONFIG, "read", {"id": 1}).key
    assert after["counters"][key] == [4, "read"], "the count goes on from the stored 3"
    assert after["totals"] == {"calls": 7, "blocked": 3, "aborts": 0}


@pytest.mark.parametrize("read", ["reducer", "settled", "view"])
def test_every_read_path_reads_format_2(read):
    value = as_v2(same_calls_now())
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
    assert state["totals"]["calls"] >= 5


@pytest.mark.parametrize("name", list(BASES))
def test_each_kind_of_value_round_trips_through_format_2(name):
    base = BASES[name]
    assert load_state(as_v2(base)) == load_state(base)


def test_a_corrupt_v2_value_still_resets_and_keeps_its_totals(caplog):
    now = same_calls_now()
    value = as_v2(now)
    value["recent_calls"] = [["k"]]
    with caplog.at_level("WARNING", logger="langgraph_replay_guard"):
        state = load_state(value)
    assert state["reset"] is not None
    assert "recent_calls[0]" in state["reset"]["reason"]
    assert "format 2" in state["reset"]["reason"]
    assert state["notice"] is not None
    assert state["counters"] == {}
    assert state["totals"] == now["totals"], "the thread totals survive the reset"
    assert len(caplog.records) == 1


@pytest.mark.parametrize("version", [0, 1, 4, "2", True, None])
def test_an_unknown_format_version_still_resets(version):
    value = as_v2(same_calls_now())
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
