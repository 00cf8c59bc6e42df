"""The channel's record of answered batches: what the ledger asks instead of the history."""

from __future__ import annotations

import json

from langgraph_replay_guard.decisions.state import (
    MAX_DELIVERED,
    delivered,
    load_state,
    unrecorded_positions,
)
from tests.unit.test_corrupt_state import event, write


def test_a_side_effect_batch_is_recorded_as_delivered_and_a_read_is_not():
    value = write({}, event("write", 1, batch="ai-1", index=0, batch_size=1))
    value = write(value, event("read", 2, batch="ai-2", index=0, batch_size=1))
    assert delivered(value, "ai-1")
    assert not delivered(value, "ai-2")  # a pure read: the ledger never asks about it
    assert not delivered(value, "ai-3")
    assert not delivered(value, None)


def test_delivered_is_bounded_and_survives_a_new_turn():
    value: dict = {}
    for i in range(3 * MAX_DELIVERED):
        value = write(value, event("write", i, batch=f"ai-{i}", index=0, batch_size=1))
    assert len(value["delivered"]) == MAX_DELIVERED
    assert delivered(value, f"ai-{3 * MAX_DELIVERED - 1}")
    assert not delivered(value, "ai-0")
    other_turn = event("read", 99, batch="ai-new", index=0, batch_size=1)
    other_turn["t"] = "h2"
    value = write(value, other_turn)
    assert value["turn"] == "h2"
    assert delivered(value, f"ai-{3 * MAX_DELIVERED - 1}")
    assert len(json.dumps(value["delivered"])) < 1000


def test_a_value_of_an_earlier_release_reads_as_nothing_delivered():
    value = write({}, event("write", 1, batch="ai-1", index=0, batch_size=1))
    older = {k: v for k, v in value.items() if k != "delivered"}
    assert load_state(older)["delivered"] == []
    assert load_state(older)["notice"] is None


def test_a_corrupt_delivered_list_resets_the_value_with_a_notice():
    value = write({}, event("write", 1, batch="ai-1", index=0, batch_size=1))
    state = load_state({**value, "delivered": [1, 2]})
    assert state["delivered"] == []
    assert "delivered" in (state["notice"] or "")


def test_unrecorded_positions_name_the_calls_another_piece_answered():
    size = 3
    assert unrecorded_positions({}, "ai-1", size) == [0, 1, 2]
    value = write({}, event("read", 1, batch="ai-1", index=1, batch_size=size))
    assert unrecorded_positions(value, "ai-1", size) == [0, 2]
    value = write(value, event("read", 0, batch="ai-1", index=0, batch_size=size))
    value = write(value, event("read", 2, batch="ai-1", index=2, batch_size=size))
    assert unrecorded_positions(value, "ai-1", size) == []
    assert unrecorded_positions(value, "ai-other", 2) == [0, 1]
    assert unrecorded_positions(value, None, 2) == []
