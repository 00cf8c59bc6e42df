"""Issue 37 item 2: the channel has one reader with one meaning; a default guard writes no cfg.

Every read of a channel value (the reducer, `settled`, the preview reads, the batch reads)
derives from one checked state, kept once per value by identity: a checkpoint copy read several
times in a step is checked once, and a corrupt value reads as the same reset state everywhere.
"""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.decisions import state
from langgraph_replay_guard.decisions.engine import call_facts, fold_settings, make_event
from langgraph_replay_guard.decisions.state import Event, merge_guard_state, own_update

CONFIG = GuardConfig(tools={"write": "unsafe"})


def _event(tool: str, arg: int, **kwargs: Any) -> Event:
    facts = call_facts(CONFIG, tool, {"id": arg})
    return make_event(facts, "success", result=f"result {arg}", turn="h1", **kwargs)


def _value() -> dict[str, Any]:
    value: Any = None
    for i in range(6):
        value = merge_guard_state(value, own_update(fold_settings(CONFIG), [_event("read", i)]))
    batch = [_event("write", 9, batch="ai-7", index=0, batch_size=2)]
    return merge_guard_state(value, own_update(fold_settings(CONFIG), batch))


def test_a_checkpoint_copy_read_by_every_reader_is_checked_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stored = json.loads(json.dumps(_value()))  # as a checkpointer gives it back: a new object
    checks: list[int] = []
    original = state.decode_fields

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        checks.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(state, "decode_fields", counting)
    assert state.batch_in_progress(stored) == "ai-7"
    assert state.unrecorded_positions(stored, "ai-7", 2) == [1]
    assert state.delivered(stored, "ai-7")
    assert state.settled(stored)["calls"] == 7
    assert state.preview_facts(stored).held
    assert state.preview_facts(stored).recorded
    assert state.load_state(stored)["log"]
    merge_guard_state(stored, own_update(fold_settings(CONFIG), [_event("read", 1)]))
    assert len(checks) == 1


def test_a_corrupt_value_reads_as_one_reset_state_everywhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    corrupt = copy.deepcopy(_value())
    corrupt["counters"] = "not a map"  # the rest, `delivered` and `log` included, is readable
    with caplog.at_level(logging.WARNING, logger="langgraph_replay_guard"):
        reset = state.settled(corrupt)
        assert reset["reset"] is not None
        # The batch readers see the reset state too, not the corrupt value's fields.
        assert state.batch_in_progress(corrupt) is None
        assert not state.delivered(corrupt, "ai-7")
        assert state.unrecorded_positions(corrupt, "ai-7", 2) == [0, 1]
        assert state.load_state(corrupt)["reset"] == reset["reset"]
    assert len([r for r in caplog.records if "was reset" in r.getMessage()]) == 1


def test_a_default_guard_writes_no_settings() -> None:
    update = own_update(fold_settings(GuardConfig()), [_event("read", 1)])
    assert "cfg" not in update
    value = merge_guard_state(None, update)
    assert value["cfg"] == {}
    # A guard that changed a setting writes that one only; the channel keeps it.
    changed = fold_settings(GuardConfig(history_window=7))
    assert changed == {"w": 7}
    assert merge_guard_state(value, own_update(changed, [_event("read", 2)]))["cfg"] == {"w": 7}


def test_a_value_that_holds_every_setting_reads_as_the_same_settings() -> None:
    # Values of earlier releases hold all seven settings: they are read, and equal the value
    # this release writes after the same calls.
    value = _value()
    old = {
        **copy.deepcopy(value),
        "cfg": {"w": 5, "cp": 4, "scope": "turn", "rr": "progress", "rd": True, "cy": True},
    }
    old["cfg"]["rm"] = True
    assert state.load_state(old) == state.load_state(value)
