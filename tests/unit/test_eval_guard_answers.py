"""`eval` and `--calibrate` leave out the calls a recorded guard answered itself (`guard`)."""

from __future__ import annotations

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.calibration import RecordingReading
from langgraph_replay_guard.evaluation import evaluate_trajectories, iter_trajectories

REFUSAL = "Not executed: 'lookup' already succeeded with exactly these arguments"


def _trajectory(marked: bool) -> dict:
    calls = [{"name": "lookup", "args": {"id": "A"}, "result": "A: premium", "turn": 0}]
    for reason in ("duplicate", "duplicate", "repeat_limit"):
        call = {"name": "lookup", "args": {"id": "A"}, "result": REFUSAL, "turn": 0}
        if marked:
            call["guard"] = reason
        calls.append(call)
    return {"id": "t", "model": "m", "calls": calls}


def test_guard_answers_are_counted_apart_and_never_scored() -> None:
    total = evaluate_trajectories([_trajectory(marked=True)], GuardConfig()).total
    assert (total.calls, total.blocked, total.wrong) == (1, 0, 0)
    assert total.guard_answered == 3
    assert total.guard_answered_by_reason == {"duplicate": 2, "repeat_limit": 1}


def test_without_the_mark_the_guards_refusals_read_as_wrong_blocks() -> None:
    # What a file of an older export gives: still readable, scored as before.
    total = evaluate_trajectories([_trajectory(marked=False)], GuardConfig()).total
    assert total.calls == 4
    assert total.guard_answered == 0
    assert total.wrong == 1  # the first duplicate: its "result" differs from the real one


def test_calibration_reads_only_the_calls_the_tools_answered() -> None:
    calls = list(RecordingReading().calls(_trajectory(marked=True), GuardConfig()))
    assert [index for index, *_ in calls] == [0]


def test_a_guard_field_that_is_not_a_reason_is_a_malformed_line() -> None:
    malformed: list[tuple[int, str]] = []
    line = '{"id": "t", "calls": [{"name": "lookup", "args": {}, "guard": 3}]}'
    assert list(iter_trajectories([line], malformed)) == []
    assert malformed == [(1, "call 0 ('lookup') has 'guard' that is not a reason text")]
