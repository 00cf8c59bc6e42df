"""`replay-guard eval --calibrate`: thresholds searched on runs with a loop and a look-alike."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.calibration import (
    calibrate,
    config_data,
    find_loops,
    score,
    tool_evidence,
)
from langgraph_replay_guard.cli.main import main
from langgraph_replay_guard.evaluation import evaluate_trajectories, iter_trajectories

POLICY = {"tools": {"search": "pure", "get_job": "pure", "get_user": "pure", "refund": "unsafe"}}


def call(name, args, result, turn=0):
    return {"name": name, "args": args, "result": result, "turn": turn}


def runs():
    """A loop, a look-alike (a poll whose result changes), a healthy re-read, a new tool."""
    return [
        # The loop: the same search, the same empty answer, eight times in one turn.
        {"id": "loop", "model": "m1", "calls": [call("search", {"q": "x"}, "[]")] * 8},
        # The look-alike: the same call four times, a new answer each time.
        {
            "id": "poll",
            "model": "m2",
            "calls": [
                call("get_job", {"id": 1}, status)
                for status in ("queued", "running", "running 50%", "done")
            ],
        },
        # Healthy: a user read three times (same answer), a refund, a tool the policy lacks.
        {
            "id": "healthy",
            "model": "m2",
            "calls": [
                call("get_user", {"id": 7}, "Ann"),
                call("notes", {"id": 7}, "vip"),
                call("get_user", {"id": 7}, "Ann"),
                call("notes", {"id": 7}, "vip"),
                call("get_user", {"id": 7}, "Ann"),
                call("refund", {"id": 7}, "refunded"),
            ],
        },
    ]


@pytest.fixture
def base():
    return GuardConfig.model_validate(POLICY)


def test_loops_are_read_from_the_recording(base):
    loops = find_loops(runs(), base)
    assert loops == [frozenset({0}), frozenset(), frozenset()]
    # The same failure with other arguments, four times, never succeeding: a loop; the same
    # row ended by a success of that tool is not one.
    failing = [call("get_user", {"id": i}, f"Error: user {i} not found") for i in range(4)]
    recovered = [*failing, call("get_user", {"id": 9}, "Bob")]
    assert find_loops([{"calls": failing}, {"calls": recovered}], base) == [
        frozenset({0}),
        frozenset(),
    ]
    # A successful write between identical calls starts the row again.
    # (Refunds of other orders: the same refund four times would loop itself.)
    pairs = [(call("search", {"q": "x"}, "[]"), call("refund", {"id": i}, "ok")) for i in range(4)]
    written = [c for pair in pairs for c in pair]
    assert find_loops([{"calls": written}], base) == [frozenset()]


def test_defaults_block_the_look_alike(base):
    got, report = score(runs(), find_loops(runs(), base), base)
    assert got.loops == got.loops_stopped == 1
    assert got.wrong == 3, "the poll's 2nd and 3rd calls are deduplicated, its 4th stopped"
    assert got.healthy_stopped == 1, "the poll is a run without a loop"
    assert {w.trajectory for w in report.wrong_blocks} == {"poll"}


def test_calibration_stops_the_loop_and_blocks_nothing_wrong(base, tmp_path):
    result = calibrate(runs(), base)
    assert result.complete
    assert result.score.safe
    assert result.score.loops == result.score.loops_stopped == 1
    assert result.score.wrong == result.report.total.wrong == 0
    assert result.score.healthy_stopped == 0
    assert result.config.policy_for("get_job").volatile, "the poll's evidence"
    # max_repeats=2 would stop the healthy run's third read.
    assert result.config.max_repeats >= 3
    assert result.changes[0] == ("tools.get_job.volatile", False, True)
    # Replay classes are never changed; the tool the policy lacks gets no entry.
    for tool, policy in base.tools.items():
        assert result.config.policy_for(tool).replay == policy.replay
    assert "notes" not in result.config.tools

    out = tmp_path / "calibrated.json"
    out.write_text(json.dumps(config_data(result.config)))
    loaded = GuardConfig.from_file(out)
    assert loaded.model_dump() == result.config.model_dump()
    again = evaluate_trajectories(runs(), loaded).total
    assert (again.blocked, again.wrong, again.aborts) == (
        result.report.total.blocked,
        0,
        result.report.total.aborts,
    )


def test_calibration_is_deterministic(base):
    first, second = calibrate(runs(), base), calibrate(runs(), base)
    assert first.config.model_dump() == second.config.model_dump()
    assert first.evaluations == second.evaluations


def test_a_spent_budget_keeps_the_start(base):
    result = calibrate(runs(), base, budget_seconds=0)
    assert not result.complete
    assert result.config.model_dump() == base.model_dump()


def test_unknown_tools_are_listed_with_their_volatile_evidence(base):
    weather = [call("weather", {"city": "Oslo"}, f"{t} C") for t in (3, 4)]
    trajectories = [*runs(), {"id": "w", "model": "m3", "calls": weather}]
    evidence = tool_evidence(trajectories, base)
    assert [e.tool for e in evidence.values() if e.source == "default"] == ["notes", "weather"]
    assert evidence["notes"].same_results == 1
    assert not evidence["notes"].volatile_candidate
    assert evidence["weather"].volatile_candidate
    assert evidence["weather"].example == ("w", 1, "3 C", "4 C")
    result = calibrate(trajectories, base)
    assert [e.tool for e in result.unknown_tools] == ["notes", "weather"]
    # Deduplicating the unknown tool's second call hides "4 C": calibration cannot fix that
    # without giving it a class, which it never does.
    assert not result.score.safe
    assert "weather" not in result.config.tools


def _write(tmp_path: Path, trajectories) -> Path:
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in trajectories))
    return path


def test_cli_calibrate_end_to_end(tmp_path, capsys):
    data = _write(tmp_path, runs())
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    out = tmp_path / "out.json"
    argv = ["eval", str(data), "--policy", str(policy), "--calibrate", str(out)]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "calibrate: pass 1:" in captured.err
    text = captured.out
    assert "Runs with a loop in the recording: 1 of 3" in text
    assert "tools.get_job.volatile" in text
    assert "defaults" in text
    assert "calibrated" in text
    assert "Unknown to the policy (1): treated as pure" in text
    assert "notes" in text
    assert f"Wrote {out}: no wrong block" in text
    loaded = GuardConfig.from_file(out)
    assert loaded.policy_for("get_job").volatile
    assert loaded.policy_for("refund").replay == "unsafe"
    # The file is a --config: eval with it blocks nothing wrong.
    assert main(["eval", str(data), "--config", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"]["wrong"] == 0


def test_cli_calibrate_json_and_exit_status_when_unsafe(tmp_path, capsys):
    weather = [call("weather", {"city": "Oslo"}, f"{t} C") for t in (3, 4)]
    data = _write(tmp_path, [*runs(), {"id": "w", "model": "m3", "calls": weather}])
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(POLICY))
    out = tmp_path / "out.json"
    argv = ["eval", str(data), "--policy", str(policy), "--calibrate", str(out), "--json"]
    assert main(argv) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["safe"] is False
    assert report["unknown_tools"] == ["notes", "weather"]
    assert report["volatile_candidates"] == ["get_job", "weather"]
    assert report["calibrated"]["wrong"] == 1
    assert GuardConfig.from_file(out).max_repeats == report["config"]["max_repeats"]


def test_cli_eval_takes_several_files(tmp_path, capsys):
    first = _write(tmp_path, runs()[:1])
    second = tmp_path / "second.jsonl"
    second.write_text("".join(json.dumps(t) + "\n" for t in runs()[1:]))
    assert main(["eval", str(first), str(second), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"]["trajectories"] == 3


def test_shipped_sample_calibrates_safely():
    data = resources.files("langgraph_replay_guard") / "data"
    with resources.as_file(data / "tau_tools.json") as tools:
        base = GuardConfig().with_policies(tools)
    lines = (data / "tau_sample.jsonl").read_text().splitlines()
    trajectories = list(iter_trajectories(lines, []))
    result = calibrate(trajectories, base)
    assert result.score.safe
    assert result.score.loops == result.score.loops_stopped == 6
    assert result.score.saved >= result.base_score.saved
    assert not result.unknown_tools
