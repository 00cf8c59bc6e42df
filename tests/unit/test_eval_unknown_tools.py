"""`replay-guard eval` counts and stops calls to a tool that does not exist."""

from __future__ import annotations

import json

import pytest

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.cli.main import main
from langgraph_replay_guard.evaluation import evaluate_trajectories

TOOLS = ["browser_type", "browser_click"]
ARGS = {"selector": "#q", "text": "weather"}
REFUSED = "Error: browser-type is not a valid tool, try one of [browser_type, browser_click]."


def call(name, result, args=ARGS):
    return {"name": name, "args": args, "result": result, "turn": 0}


def looping(times=10, *, tools=TOOLS):
    run = {"id": "loop", "model": "m", "calls": [call("browser-type", REFUSED)] * times}
    if tools is not None:
        run["tools"] = tools
    return run


def corrected(*, tools=TOOLS):
    """One wrong name, then the right tool and on with the task: not a loop."""
    run = {
        "id": "ok",
        "model": "m",
        "calls": [
            call("browser-type", REFUSED),
            call("browser_type", "typed"),
            call("browser_click", "clicked", {"selector": "#go"}),
        ],
    }
    if tools is not None:
        run["tools"] = tools
    return run


@pytest.mark.parametrize(
    ("runs", "tools"),
    [
        ([looping()], None),  # the run lists its tools
        ([looping(tools=None)], TOOLS),  # --tools
        ([looping(tools=None)], None),  # the recorded "is not a valid tool" answers
    ],
    ids=["listed", "given", "from-results"],
)
def test_a_hallucinated_name_loop_is_stopped(runs, tools):
    report = evaluate_trajectories(runs, GuardConfig(), tools=tools)
    total = report.total
    assert total.unknown_tools == 10
    assert total.aborts == 1
    assert [(a.call_index, a.tool, a.reason) for a in report.aborts] == [
        (3, "browser-type", "unknown_tool")
    ]
    assert total.blocked == 4
    assert total.by_reason == {"unknown_tool": 4}
    assert total.cut == 6
    assert total.wrong == 0, "a call to a tool that does not exist hides nothing"
    assert total.repeat_kinds["unknown_tool"] == [9, 9]


def test_varied_names_are_one_loop():
    names = ["browser-type", "browser_typ", "mcp__browser_type", "browserType", "type"]
    run = {"id": "v", "calls": [call(n, f"Error: {n} is not a valid tool") for n in names]}
    report = evaluate_trajectories([run], GuardConfig(), tools=TOOLS)
    assert [a.reason for a in report.aborts] == ["unknown_tool"]
    assert report.aborts[0].call_index == 3


def test_one_wrong_name_then_the_right_tool_is_not_stopped():
    report = evaluate_trajectories([corrected()], GuardConfig())
    total = report.total
    assert total.aborts == 0
    assert total.unknown_tools == 1
    assert total.wrong == 0
    assert total.by_reason == {"unknown_tool": 1}, "the guard answers the wrong name itself"


def test_without_a_tool_list_successful_calls_are_tools():
    report = evaluate_trajectories([corrected(tools=None)], GuardConfig())
    assert report.total.unknown_tools == 1
    assert report.total.aborts == 0


def test_a_malformed_tools_list_is_reported():
    bad = {**looping(), "tools": "browser_type"}
    report = evaluate_trajectories([], GuardConfig())
    from langgraph_replay_guard.evaluation import iter_trajectories

    malformed: list[tuple[int, str]] = []
    assert list(iter_trajectories([json.dumps(bad)], malformed)) == []
    assert malformed == [(1, "'tools' is not a list of tool names")]
    assert report.total.calls == 0


def test_cli_tools_option(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(looping(tools=None)) + "\n" + json.dumps(corrected(tools=None)))
    assert main(["eval", str(path), "--tools", "browser_type,browser_click"]) == 0
    text = capsys.readouterr().out
    assert "Calls to tools that do not exist: 11" in text
    assert "call   3 browser-type (unknown_tool)" in text
    assert (
        main(["eval", str(path), "--tools", "browser_type", "--tools", "browser_click", "--json"])
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["total"]["unknown_tools"] == 11
    assert data["total"]["aborts"] == 1


def test_unknown_names_have_their_own_class_and_are_not_tool_failures():
    # Varied arguments against the same refusal: a tool that does not exist never ran, so
    # the same-failure count (failures a real tool returned) must not see these calls.
    calls = [call("browser-type", REFUSED, {"text": str(n)}) for n in range(3)]
    report = evaluate_trajectories([{"id": "v", "calls": calls}], GuardConfig(), tools=TOOLS)
    assert list(report.by_tool_class["browser-type"]) == ["unknown"]
    assert "same_failure" not in report.total.repeat_kinds
    assert report.total.by_reason == {"unknown_tool": 3}
