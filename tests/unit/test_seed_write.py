"""The guard's first write to an empty channel: a whole state that is also an update."""

from __future__ import annotations

import copy

from langgraph_replay_guard.decisions.state import (
    SEED_KEY,
    load_state,
    merge_guard_state,
    seed_write,
)
from tests.unit.test_corrupt_state import CFG, event, write


def _calls(value: object) -> int:
    return load_state(value)["totals"]["calls"]


def test_a_seed_stored_as_it_is_reads_as_the_state_its_events_fold_into():
    seed = seed_write(CFG, [event("read", 1, batch="ai-1", index=0, batch_size=1)])
    assert seed == {
        **write({}, event("read", 1, batch="ai-1", index=0, batch_size=1)),
        SEED_KEY: seed[SEED_KEY],
    }
    state = load_state(seed)  # what LangGraph stores for an empty channel's first write
    assert SEED_KEY not in state
    assert state["notice"] is None
    assert _calls(seed) == 1


def test_parallel_first_writes_of_one_step_keep_every_event():
    # Two tool tasks of one batch both saw an empty channel: LangGraph stores the first
    # write as it is and merges the second with the reducer.
    a = seed_write(CFG, [event("read", 1, batch="ai-1", index=0, batch_size=2)])
    b = seed_write(CFG, [event("read", 2, batch="ai-1", index=1, batch_size=2)])
    for first, second in ((a, b), (b, a)):
        value = merge_guard_state(first, second)
        assert value["totals"]["calls"] == 2
        assert value["notice"] is None
    assert merge_guard_state(a, b) == merge_guard_state(b, a)


def test_a_seed_merged_onto_an_existing_value_is_an_update():
    value = write({}, event("read", 1, batch="ai-0", index=0, batch_size=1))
    seed = seed_write(CFG, [event("read", 2, batch="ai-1", index=0, batch_size=1)])
    assert _calls(merge_guard_state(value, seed)) == 2


def test_a_seed_edited_since_is_read_as_the_whole_state_it_is():
    seed = seed_write(CFG, [event("read", 1, batch="ai-1", index=0, batch_size=1)])
    edited = copy.deepcopy(seed)
    edited["reminder"] = "garbage"
    value = merge_guard_state(seed, edited)  # update_state in Studio with a broken value
    assert value["reset"] is not None
    assert "reminder" in value["reset"]["reason"]
    assert value["totals"]["calls"] == 1  # the totals it showed survive the reset
