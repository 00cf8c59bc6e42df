"""Property tests: key canonicalization, reducer determinism, bounded state, pure decisions."""

from __future__ import annotations

import json
import random
import string

from hypothesis import given, settings
from hypothesis import strategies as st

from langgraph_replay_guard.decisions.engine import call_facts, decide, fold_settings, make_event
from langgraph_replay_guard.decisions.keys import call_key
from langgraph_replay_guard.decisions.state import (
    MAX_RESULTS,
    MAX_TRACKED_KEYS,
    fold_events,
    merge_guard_state,
    new_state,
    settled,
)
from langgraph_replay_guard.policy.config import GuardConfig
from tests.hypothesis_budget import examples

PROPERTY = settings(max_examples=examples(200), deadline=None)

# --- 1. key canonicalization ------------------------------------------------------------

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)


def reversed_insertion(value):
    """The same value with every dict's keys inserted in reverse order."""
    if isinstance(value, dict):
        return {key: reversed_insertion(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_insertion(item) for item in value]
    return value


@PROPERTY
@given(json_values)
def test_key_survives_json_round_trip(value):
    # A checkpoint stores arguments as JSON: the key must not change on the way back.
    assert call_key("t", value) == call_key("t", json.loads(json.dumps(value)))


@PROPERTY
@given(st.dictionaries(st.text(max_size=8), json_values, max_size=6))
def test_key_ignores_insertion_order(args):
    assert call_key("t", args) == call_key("t", reversed_insertion(args))


@PROPERTY
@given(st.integers(min_value=-(2**53), max_value=2**53))
def test_integral_float_has_same_key_as_int(i):
    assert float(i) == i
    assert call_key("t", {"x": i}) == call_key("t", {"x": float(i)})


@PROPERTY
@given(st.floats(allow_nan=False, allow_infinity=False).filter(float.is_integer))
def test_any_integral_float_has_same_key_as_its_int(f):
    assert call_key("t", {"x": f}) == call_key("t", {"x": int(f)})


# --- 2. reducer order independence ------------------------------------------------------

CONFIG = GuardConfig(tools={"write": "unsafe"})
CFG = fold_settings(CONFIG)
TOOLS = ["read", "search", "write"]
OUTCOMES = ["success", "failure", "timeout", "denied"]

# (tool, argument, outcome, result): few argument values, so keys repeat within and
# across batches and the dedup, counting, result-diff and cycle bookkeeping all run.
call_specs = st.tuples(
    st.sampled_from(TOOLS),
    st.integers(0, 2),
    st.sampled_from(OUTCOMES),
    st.sampled_from(["same", "other", "", "a longer result text"]),
)


def batch_updates(batch, specs, *, sized=False):
    updates = []
    for index, (tool, arg, outcome, result) in enumerate(specs):
        event = make_event(
            call_facts(CONFIG, tool, {"id": arg}),
            outcome,
            result=result,
            batch=batch,
            index=index,
            turn="h1",
            reason="duplicate" if outcome == "denied" else None,
            batch_size=len(specs) if sized else None,
        )
        updates.append({"op": "events", "cfg": CFG, "events": [event]})
    return updates


def apply_all(state, updates):
    for update in updates:
        state = merge_guard_state(state, update)
    return state


base_states = st.one_of(
    st.just({}),
    st.lists(call_specs, min_size=1, max_size=6).map(
        lambda specs: apply_all({}, batch_updates("ai-0", specs))
    ),
)


@PROPERTY
@given(
    base=base_states,
    specs=st.lists(call_specs, min_size=1, max_size=8),
    sized=st.booleans(),
    data=st.data(),
)
def test_parallel_writes_fold_the_same_in_any_order(base, specs, sized, data):
    updates = batch_updates("ai-1", specs, sized=sized)
    shuffled = data.draw(st.permutations(updates), label="write order")

    in_order = apply_all(base, updates)
    in_other_order = apply_all(base, shuffled)

    assert in_other_order == in_order
    assert settled(in_other_order) == settled(in_order)
    assert settled(in_order)["calls"] >= len(specs)
    # A batch whose calls all reported is folded in the stored value itself (what Studio shows).
    assert (not in_order["log"]) == sized


def test_a_complete_batch_is_settled_in_the_stored_value():
    specs = [("lookup", 1, "success", "same"), ("lookup", 1, "denied", "")]
    value = apply_all({}, batch_updates("ai-9", specs, sized=True))
    assert value["log"] == []
    assert value["calls"] == 2
    assert value == settled(value)


@PROPERTY
@given(
    base=base_states,
    specs=st.lists(call_specs, min_size=1, max_size=8),
    sized=st.booleans(),
    data=st.data(),
)
def test_retried_write_is_idempotent(base, specs, sized, data):
    updates = batch_updates("ai-1", specs, sized=sized)
    retried = data.draw(st.sampled_from(updates), label="retried write")

    once = merge_guard_state(base, retried)
    twice = merge_guard_state(once, retried)
    assert settled(twice) == settled(once)

    # A retry arriving anywhere among the other writes of the batch changes nothing either.
    shuffled = data.draw(st.permutations(updates), label="write order")
    position = data.draw(st.integers(0, len(shuffled)), label="retry position")
    with_retry = [*shuffled[:position], retried, *shuffled[position:]]
    assert settled(apply_all(base, with_retry)) == settled(apply_all(base, updates))


# --- 3. boundedness ---------------------------------------------------------------------

THREAD_CONFIG = GuardConfig(scope="thread")
THREAD_CFG = fold_settings(THREAD_CONFIG)
MAX_STATE_CHARS = 8000
_RESULT_ALPHABET = string.ascii_letters + string.digits + " "


def random_event(rng, config, recent_args):
    """One call with mostly fresh arguments, sometimes a repeat of a recent one."""
    tool = rng.choice(["read", "search", "lookup", "fetch", "list_items", "get_status"])
    if recent_args and rng.random() < 0.3:
        args = rng.choice(recent_args)
    else:
        args = {"q": rng.randrange(10**9), "page": rng.randrange(5)}
        recent_args.append(args)
        del recent_args[:-20]
    outcome = rng.choice(OUTCOMES)
    result = "".join(rng.choices(_RESULT_ALPHABET, k=rng.randrange(300)))
    return make_event(
        call_facts(config, tool, args),
        outcome,
        result=result,
        reason=rng.choice(["duplicate", "repeat_limit", "cycle"]) if outcome == "denied" else None,
        abort=outcome == "denied" and rng.random() < 0.1,
        batch=None,
        turn=f"h{rng.randrange(3)}",
    )


def assert_bounded(state, config):
    text = json.dumps(state)  # once: the 10,000-call test checks after every call
    assert len(text) < MAX_STATE_CHARS
    assert len(state["counters"]) <= MAX_TRACKED_KEYS
    assert len(state["results"]) <= MAX_RESULTS
    assert len(state["recent_calls"]) <= config.history_window
    assert json.loads(text) == state, "the state must be plain JSON data"


@PROPERTY
@given(n=st.integers(0, 3000), seed=st.integers(0, 2**32 - 1))
def test_state_stays_bounded(n, seed):
    rng = random.Random(seed)
    recent: list = []
    state = new_state()
    for _ in range(n):
        fold_events(state, [random_event(rng, THREAD_CONFIG, recent)], THREAD_CFG)
    assert_bounded(state, THREAD_CONFIG)
    assert state["totals"]["calls"] == n


def test_state_stays_bounded_over_ten_thousand_calls():
    rng = random.Random(20240601)
    recent: list = []
    state = new_state()
    most_counts = most_results = 0
    for _ in range(10_000):
        fold_events(state, [random_event(rng, THREAD_CONFIG, recent)], THREAD_CFG)
        assert_bounded(state, THREAD_CONFIG)
        most_counts = max(most_counts, len(state["counters"]))
        most_results = max(most_results, len(state["results"]))
    assert state["totals"]["calls"] == 10_000
    # The caps were actually reached, so the bounds above were really exercised.
    assert most_counts == MAX_TRACKED_KEYS
    assert most_results == MAX_RESULTS


# --- 4. decide is pure ------------------------------------------------------------------

DECIDE_TOOLS = ["read", "search", "write", "clock"]
decide_configs = st.builds(
    GuardConfig,
    max_repeats=st.integers(1, 5),
    scope=st.sampled_from(["turn", "thread"]),
    exit_behavior=st.sampled_from(["end", "error", "continue"]),
    dedup=st.booleans(),
    tools=st.just({"write": "unsafe", "clock": {"replay": "pure", "volatile": True}}),
)
history_specs = st.tuples(
    st.sampled_from(DECIDE_TOOLS),
    st.integers(0, 2),
    st.sampled_from(OUTCOMES),
    st.sampled_from(["same", "other"]),
    st.sampled_from(["h1", "h2"]),
    st.sampled_from(["duplicate", "repeat_limit", "cycle", "same_result"]),
    st.booleans(),
)
# Random histories, and short patterns repeated a few times (so that identical results in a
# row and A-B-A-B cycles occur, not only plain repeats).
histories = st.lists(history_specs, max_size=25) | st.lists(
    history_specs, min_size=1, max_size=3
).flatmap(lambda pattern: st.integers(2, 4).map(lambda times: pattern * times))


def build_state(config, history):
    state = new_state()
    for tool, arg, outcome, result, turn, reason, abort in history:
        denied = outcome == "denied"
        event = make_event(
            call_facts(config, tool, {"id": arg}),
            outcome,
            result=result,
            reason=reason if denied else None,
            abort=denied and abort,
            turn=turn,
        )
        fold_events(state, [event], fold_settings(config))
    return state


calls = st.tuples(st.sampled_from(DECIDE_TOOLS), st.integers(0, 2))


@PROPERTY
@given(
    config=decide_configs,
    history=histories,
    turn=st.sampled_from(["h1", "h2", "h3"]),
    earlier=st.lists(calls, max_size=3),
    data=st.data(),
)
def test_decide_is_pure(config, history, turn, earlier, data):
    state = build_state(config, history)
    before = json.dumps(state, sort_keys=True)
    # Mostly a call the history made, so that the blocking layers have something to say.
    seen = [(tool, arg) for tool, arg, *_ in history]
    tool, arg = data.draw(st.sampled_from(seen) | calls if seen else calls, label="call")
    facts = call_facts(config, tool, {"id": arg})
    earlier_keys = [call_facts(config, t, {"id": a}).key for t, a in earlier]

    first = decide(state, facts, config, turn=turn, earlier_in_batch=earlier_keys)
    second = decide(state, facts, config, turn=turn, earlier_in_batch=earlier_keys)

    assert first == second
    assert json.dumps(state, sort_keys=True) == before
