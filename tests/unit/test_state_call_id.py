"""A result memo names the tool_call_id of a call that ran changed; older values still load.

A middleware that changes an argument the model gave (int -> str) makes a call no model
message holds: its duplicates find its answer by the id the channel remembers
(a result memo's fifth entry, event key `d`). The field is optional: a value written before it
existed (four-entry memos, events without `d`) loads, folds and reads back as it was.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from langgraph_replay_guard.decisions.engine import call_facts, earlier_call_id
from langgraph_replay_guard.decisions.state import load_state, merge_guard_state, settled
from langgraph_replay_guard.decisions.state_format import (
    InvalidStateError,
    decode_events,
)
from tests.unit.test_corrupt_state import CONFIG, event, write


def _key(arg: int) -> str:
    return call_facts(CONFIG, "read", {"id": arg}).key


def test_a_changed_call_s_result_remembers_its_id() -> None:
    value = write({}, event("read", 1, call_id="call-1"))
    assert value["results"][_key(1)][4:] == ["call-1"]
    assert earlier_call_id(settled(value), _key(1)) == "call-1"
    stored = json.loads(json.dumps(value))  # what a checkpointer gives back
    assert load_state(stored) == value


def test_a_call_that_ran_as_asked_keeps_the_four_entry_memo() -> None:
    value = write({}, event("read", 1))
    assert len(value["results"][_key(1)]) == 4
    assert earlier_call_id(settled(value), _key(1)) is None
    assert "d" not in event("read", 1)


def test_the_next_result_of_the_key_replaces_the_id() -> None:
    # The latest success is the earlier answer: one that ran as asked clears the id.
    value = write({}, event("read", 1, call_id="call-1"))
    value = write(value, event("read", 1))
    assert earlier_call_id(settled(value), _key(1)) is None


def test_a_value_without_the_field_loads_and_folds_as_before() -> None:
    old: dict[str, Any] = write({}, event("read", 1), event("read", 2, result="r"))
    assert all(len(memo) == 4 for memo in old["results"].values())
    stored = json.loads(json.dumps(old))
    assert load_state(stored) == old
    after = write(stored, event("read", 3, call_id="call-3"))
    assert after["reset"] is None
    assert len(after["results"][_key(1)]) == 4
    assert after["results"][_key(3)][4] == "call-3"


def test_scrub_and_show_keep_the_id() -> None:
    value = write({}, event("read", 1, call_id="call-1"))
    digest, epoch, in_a_row, preview, call_id = value["results"][_key(1)]
    assert preview
    assert call_id == "call-1"
    scrubbed = merge_guard_state(value, {"op": "scrub", "previews": [preview]})
    assert scrubbed["results"][_key(1)] == [digest, epoch, in_a_row, None, "call-1"]
    shown = merge_guard_state(scrubbed, {"op": "show", "previews": {digest: "p"}})
    assert shown["results"][_key(1)] == [digest, epoch, in_a_row, "p", "call-1"]
    # A memo without an id stays four entries through both.
    plain = write({}, event("read", 2))
    text = plain["results"][_key(2)][3]
    again = merge_guard_state(plain, {"op": "scrub", "previews": [text]})
    assert len(again["results"][_key(2)]) == 4


@pytest.mark.parametrize("bad", [7, None, ["call-1"]])
def test_a_malformed_id_in_a_memo_resets_with_its_path(bad: Any) -> None:
    value = copy.deepcopy(write({}, event("read", 1, call_id="call-1")))
    value["results"][_key(1)][4] = bad
    if bad is None:  # null is "no id": the memo stays valid
        assert load_state(value)["reset"] is None
        return
    state = load_state(value)
    assert state["reset"] is not None
    assert f"results[{_key(1)!r}]" in state["reset"]["reason"]


def test_a_six_entry_memo_is_malformed() -> None:
    value = copy.deepcopy(write({}, event("read", 1, call_id="call-1")))
    value["results"][_key(1)].append("x")
    assert load_state(value)["reset"] is not None


def test_an_event_s_id_is_checked() -> None:
    good = event("read", 1, call_id="call-1")
    assert good["d"] == "call-1"
    assert decode_events([good], "events") == [good]
    with pytest.raises(InvalidStateError, match=r"events\[0\]\.d"):
        decode_events([{**good, "d": 5}], "events")
