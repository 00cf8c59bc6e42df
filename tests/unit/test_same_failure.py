"""The same-failure layer in the core: signatures, the control API, the channel format, eval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from langgraph_replay_guard import GuardConfig, ReplayGuard, ToolPolicy
from langgraph_replay_guard.decisions.engine import call_facts, fold_settings, make_event
from langgraph_replay_guard.decisions.failures import failure_signature, normalize_failure
from langgraph_replay_guard.decisions.state import (
    MAX_FAILURE_STREAKS,
    load_state,
    merge_guard_state,
    new_state,
    settled,
)
from langgraph_replay_guard.evaluation import evaluate_file

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
LIMIT = GuardConfig().max_same_failures


# -- the signature ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("javac: command not found", "bash: line 3: javac: command not found"),
        ("/bin/bash: line 12: javac: command not found", "sh: javac: command not found"),
        (
            "ERROR: Parameter `path` is required for command: create.",
            "ERROR: Parameter `path` is required for command: create.",
        ),
        ("Error: request 3f2a9c1e-77aa-4b1c-9d0e-0123456789ab failed", "Error: request 9 failed"),
        ("Error: cannot open /tmp/a/b.txt", "Error: cannot open C:\\work\\c.txt"),
        ("timeout after 12.5s at 0xdeadbeef", "timeout after 3s at 0x1f"),
        ("Error: plan 'P1006' not found", 'Error: plan "P1007" not found'),
    ],
)
def test_volatile_parts_do_not_change_the_signature(first, second):
    assert failure_signature(first) == failure_signature(second)


def test_an_echo_of_the_arguments_is_ignored():
    first = failure_signature("Plan with ID P1006 not found", {"id": "P1006"})
    assert first == failure_signature("Plan with ID P1015 not found", {"id": "P1015"})


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("javac: command not found", "javac: permission denied"),
        ("javac: command not found", "java: command not found"),
        ("Parameter `path` is required", "Parameter `path` is invalid"),
    ],
)
def test_different_failures_have_different_signatures(first, second):
    assert failure_signature(first) != failure_signature(second)


def test_the_signature_is_small_and_the_text_bounded():
    assert len(failure_signature("x" * 1_000_000)) == 16
    assert len(normalize_failure("error " * 100_000)) <= 2_000


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        # Long runs the path and id patterns once read from every character (35 ms a text;
        # benchmarks/bench_engine.py prints what a failure's signature costs now).
        ("A" * 2_000, "a" * 2_000),
        ("a-" * 1_000, "a-" * 1_000),
        ("x/" + "~" * 1_998, "<path>" + "~" * 1_998),
        # A path starts where a word starts: the word before a colon stays.
        ("error:/usr/lib/libfoo.so: cannot open", "error:<path>: cannot open"),
        ("Error: cannot open C:\\work\\c.txt", "error: cannot open <path>"),
        # An id is a hexadecimal run of 6 or more with a digit; a run without one is a word.
        ("request 3f2a9c1e-77aa-4b1c-9d0e-0123456789ab failed", "request # failed"),
        ("ref " + "ab-" * 30 + "1 gone", "ref # gone"),
        ("decade-facade failed", "decade-facade failed"),
    ],
)
def test_long_runs_and_paths_normalize_as_documented(text, normalized):
    assert normalize_failure(text) == normalized


# -- the control API --------------------------------------------------------------------------


def play(ctl: Any, calls: list[tuple[str, dict[str, Any], str, bool]]) -> list[str | None]:
    """Run calls through a control; each is (tool, args, text, failed). Returns the skips."""
    reasons = []
    for name, args, text, failed in calls:
        skip, reason = ctl.should_skip(name, args)
        reasons.append(reason)
        if skip:
            ctl.record_denied(name, args)
            break
        if failed:
            ctl.record_failure(name, args, text)
        else:
            ctl.record_success(name, args, text)
    return reasons


def test_control_stops_the_javac_loop_after_a_reminder():
    ctl = ReplayGuard().control()
    calls = [
        ("bash", {"command": f"javac -X{n} Main.java"}, f"bash: line {n}: javac: not found", True)
        for n in range(25)
    ]
    reminders = []
    for call in calls:
        reason = play(ctl, [call])[0]
        reminders.append(ctl.reminder())
        if reason is not None:
            break
    assert reason == "same_failure"
    assert len(reminders) == LIMIT + 2, "LIMIT failures, the reminder, one more, the stop"
    assert [r is not None for r in reminders[:-1]] == [False] * (LIMIT - 1) + [True, False]
    assert "keeps failing with the same error" in reminders[LIMIT - 1]
    assert "not found" not in reminders[LIMIT - 1], "tool output never enters the prompt"
    view = ctl.inspect()
    assert view.stop_reason == "same_failure"
    assert view.failures == (("bash", LIMIT + 2),)


def test_control_records_failures_without_text_too():
    ctl = ReplayGuard().control()
    for n in range(LIMIT + 1):
        assert ctl.should_skip("create", {"n": n}) == (False, None)
        ctl.record_failure("create", {"n": n})
    assert ctl.should_skip("create", {"n": 99}) == (True, "same_failure")


def test_successes_never_trigger_the_layer():
    ctl = ReplayGuard().control()
    calls = [("search_flights", {"date": f"2024-05-{d:02d}"}, "[]", False) for d in range(1, 31)]
    assert play(ctl, calls) == [None] * 30
    assert ctl.inspect().failures == ()


def test_a_success_of_the_tool_ends_its_streak():
    ctl = ReplayGuard().control()
    calls = []
    for n in range(4 * LIMIT):
        calls.append(("bash", {"command": f"javac {n}"}, "javac: command not found", True))
        if n % LIMIT == LIMIT - 1:
            calls.append(("bash", {"command": f"ls {n}"}, "Main.java", False))
    assert set(play(ctl, calls)) == {None}


def test_progress_ends_every_streak():
    # Re-running the tests after each edit: the same failure until the fix lands.
    ctl = ReplayGuard(GuardConfig(tools={"write_file": "unsafe"})).control()
    calls = []
    for n in range(10):
        calls.append(("pytest", {}, f"FAILED test_a - AssertionError in 0.{n}s", True))
        calls.append(("write_file", {"text": f"attempt {n}"}, "", False))
    assert set(play(ctl, calls)) == {None}


def test_other_tools_in_between_do_not_break_the_row():
    ctl = ReplayGuard().control()
    calls = []
    for n in range(LIMIT + 2):
        calls.append(("bash", {"command": f"javac {n}"}, "javac: command not found", True))
        calls.append(("think", {"thought": f"try flag {n}"}, "", False))
    assert play(ctl, calls)[-1] == "same_failure"


def test_different_tools_failing_each_count_their_own_row():
    ctl = ReplayGuard().control()
    calls = [
        (tool, {"n": n}, f"{tool} failed", True)
        for n in range(LIMIT)
        for tool in ("bash", "editor", "find_file")
    ]
    assert set(play(ctl, calls)) == {None}, "no tool failed more than LIMIT times in a row"


def test_the_failure_pattern_marks_a_normal_result_as_a_failure():
    config = GuardConfig(failure_pattern="command not found")
    ctl = ReplayGuard(config).control()
    calls = [("bash", {"c": n}, "bash: javac: command not found", False) for n in range(20)]
    assert play(ctl, calls)[-1] == "same_failure"
    ctl = ReplayGuard().control()
    assert set(play(ctl, calls)) == {None}, "without the pattern a result is a success"


def test_a_per_tool_threshold_and_the_layer_off():
    calls = [("bash", {"c": n}, "javac: command not found", True) for n in range(20)]
    ctl = ReplayGuard(GuardConfig(tools={"bash": ToolPolicy(max_same_failures=1)})).control()
    assert play(ctl, calls) == [None, None, "same_failure"]
    ctl = ReplayGuard(GuardConfig(max_same_failures=0)).control()
    assert set(play(ctl, calls)) == {None}
    ctl = ReplayGuard(GuardConfig(tools={"bash": ToolPolicy(max_same_failures=0)})).control()
    assert set(play(ctl, calls)) == {None}


def test_the_options_are_checked():
    with pytest.raises(ValueError, match="failure_pattern"):
        GuardConfig(failure_pattern="(")
    with pytest.raises(ValueError, match="max_same_failures"):
        GuardConfig(max_same_failures=-1)


# -- the channel ------------------------------------------------------------------------------


def failed_event(config: GuardConfig, tool: str, n: int, turn: str = "t1") -> Any:
    facts = call_facts(config, tool, {"n": n})
    return make_event(facts, "failure", result=f"{tool}: error {n}", turn=turn)


def test_a_failure_event_carries_its_signature_and_a_success_does_not():
    config = GuardConfig()
    facts = call_facts(config, "bash", {"c": 1})
    failed = make_event(facts, "failure", result="bash: line 3: javac: command not found")
    assert failed["f"] == [failure_signature("javac: command not found"), LIMIT]
    assert "f" not in make_event(facts, "success", result="ok")
    off = call_facts(GuardConfig(max_same_failures=0), "bash", {"c": 1})
    assert "f" not in make_event(off, "failure", result="x")


def test_the_streaks_are_bounded_and_survive_a_checkpoint():
    config = GuardConfig()
    value: Any = None
    for n in range(MAX_FAILURE_STREAKS + 5):
        update = {"op": "events", "cfg": fold_settings(config)}
        update["events"] = [failed_event(config, f"tool{n}", n)]
        value = merge_guard_state(value, update)
    assert len(value["failures"]) == MAX_FAILURE_STREAKS
    stored = json.loads(json.dumps(value))  # what a checkpointer gives back
    assert load_state(stored)["failures"] == value["failures"]


def test_a_value_of_the_previous_release_reads_with_no_streaks():
    before = new_state()
    del before["failures"]  # format 2 as the previous release wrote it
    assert load_state(before)["failures"] == {}
    assert load_state(before)["notice"] is None
    v2 = {**new_state(), "v": 2}
    del v2["failures"]
    assert settled(v2)["failures"] == {}
    assert settled(v2)["notice"] is None


def test_an_event_of_the_previous_release_folds():
    config = GuardConfig()
    event = dict(failed_event(config, "bash", 1))
    del event["f"]
    value = merge_guard_state(None, {"op": "events", "cfg": {}, "events": [event]})
    assert value["notice"] is None
    assert value["calls"] == 1


@pytest.mark.parametrize("bad", [["sig"], ["sig", 0], [1, 2], "sig"])
def test_a_malformed_signature_is_refused(bad):
    event = dict(failed_event(GuardConfig(), "bash", 1))
    event["f"] = bad
    value = merge_guard_state(None, {"op": "events", "cfg": {}, "events": [event]})
    assert value["calls"] == 0
    assert "events[0].f" in value["notice"]


@pytest.mark.parametrize("bad", [[], {"bash": ["sig"]}, {"bash": ["sig", 0]}, {"bash": [1, 1]}])
def test_a_corrupt_streak_map_resets_the_state_with_a_reason(bad):
    value = new_state()
    value["failures"] = bad
    state = load_state(value)
    assert state["reset"] is not None
    assert "failures" in state["reset"]["reason"]


# -- eval on the synthetic coding runs --------------------------------------------------------


def test_eval_stops_both_loops_and_leaves_the_lookalikes_alone():
    config = GuardConfig.model_validate(
        json.loads((DATA / "coding-failures.json").read_text())
    ).with_policies(DATA / "coding-presets.json")
    report = evaluate_file(DATA / "coding-same-failure.jsonl", config)
    aborted = sorted(a.trajectory for a in report.aborts)
    assert aborted == [
        "loop-editor-create-0",
        "loop-editor-create-1",
        "loop-javac-flags-0",
        "loop-javac-flags-1",
    ]
    assert {a.reason for a in report.aborts} == {"same_failure"}
    total = report.total
    assert total.wrong == 0
    assert total.by_reason == {"same_failure": 4}
    # Each loop ends at its (LIMIT + 2)th failing call: 25 and 29 calls, twice each.
    assert total.blocked + total.cut == 2 * (25 - LIMIT - 1) + 2 * (29 - LIMIT - 1)
    assert report.total.repeat_kinds["same_failure"][1] == total.blocked + total.cut
    lookalikes = report.by_model["synthetic-strong"]
    assert (lookalikes.blocked, lookalikes.aborts, lookalikes.cut) == (0, 0, 0)
