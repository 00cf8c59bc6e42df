"""The guard's first write to an empty channel: a plain write, stored as it is, read as a state."""

from __future__ import annotations

from langgraph_replay_guard.decisions.state import (
    load_state,
    merge_guard_state,
    own_update,
    settled,
)
from tests.unit.test_corrupt_state import CFG, event, write


def _calls(value: object) -> int:
    return load_state(value)["totals"]["calls"]


def test_the_first_write_is_a_plain_write_read_as_the_state_its_events_fold_into():
    first = own_update(CFG, [event("read", 1, batch="ai-1", index=0, batch_size=1)])
    assert first == own_update(CFG, first["events"]), "no whole state rides with the events"
    state = load_state(first)  # what LangGraph stores for an empty channel's first write
    assert state == write({}, event("read", 1, batch="ai-1", index=0, batch_size=1))
    assert state["notice"] is None
    assert _calls(first) == 1
    assert settled(first)["totals"]["calls"] == 1


def test_parallel_first_writes_of_one_step_keep_every_event():
    # Two tool tasks of one batch both saw an empty channel: LangGraph stores the first
    # write as it is and merges the second with the reducer.
    a = own_update(CFG, [event("read", 1, batch="ai-1", index=0, batch_size=2)])
    b = own_update(CFG, [event("read", 2, batch="ai-1", index=1, batch_size=2)])
    for first, second in ((a, b), (b, a)):
        value = merge_guard_state(first, second)
        assert value["totals"]["calls"] == 2
        assert value["notice"] is None
    assert merge_guard_state(a, b) == merge_guard_state(b, a)


def test_a_first_write_merged_onto_an_existing_value_is_an_update():
    value = write({}, event("read", 1, batch="ai-0", index=0, batch_size=1))
    first = own_update(CFG, [event("read", 2, batch="ai-1", index=0, batch_size=1)])
    assert _calls(merge_guard_state(value, first)) == 2


def test_a_seed_of_an_earlier_release_is_read_as_the_state_it_holds():
    # Format 2 wrote a whole state with its events under `seed` (a checkpoint may hold one).
    ev = event("read", 1, batch="ai-1", index=0, batch_size=1)
    seed = {**write({}, ev), "v": 2, "seed": [ev]}
    assert _calls(seed) == 1  # stored as the channel's first value: the state it is
    # Merged after another write it is a whole state, as any: it replaces the value (a turn
    # in progress restarts its counters, CHANGELOG).
    other = write({}, event("read", 2, batch="ai-0", index=0, batch_size=1))
    assert _calls(merge_guard_state(other, seed)) == 1
