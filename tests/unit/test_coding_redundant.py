"""Coding agents: redundant reads caught on real runs, and why the others ran (issue 35).

The sample `tests/fixtures/mini-swe-sample.jsonl.gz` holds 6 of the 239 real mini-swe-agent
runs of mini-swe-tune (gemini-3-pro-preview on SWE-bench Verified; source:
gruckion/mini-swe-agent, swebench_results/20251118_gemini-3-pro-74pct/trajs, MIT licensed),
unchanged: the three whose re-reads the default dedup window missed, and three others with
repeats. `benchmarks/eval_toolkits.py` measures the whole file.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.cli.main import main
from langgraph_replay_guard.evaluation import evaluate_file
from tests.unit.engine_runs import run_through_engine

SAMPLE = Path(__file__).parent.parent / "fixtures" / "mini-swe-sample.jsonl.gz"


def test_mini_swe_sample_meets_the_goals_with_the_toolkit_alone():
    with gzip.open(SAMPLE, "rb") as lines:
        report = evaluate_file(lines, GuardConfig(toolkits=["mini-swe-agent"]))
    total = report.total
    assert total.trajectories == 6
    assert total.wrong == 0
    assert total.aborts == 0  # none of these runs loops
    assert total.repeat_kinds["redundant_read"][0] == 7
    assert (total.kind_rate("redundant_read") or 0) >= 0.9
    assert report.missed_reads == []


def test_mini_swe_agent_dedup_reaches_back_over_its_whole_history():
    # mini-swe-agent keeps every observation in the model's context: a file read 10
    # commands ago, nothing written since, is still there.
    run = run_through_engine(ReplayGuard(toolkits=["mini-swe-agent"]))
    read = {"command": "cat src/cache.py"}
    assert run("bash", read, "<returncode>0</returncode>\nttl = 60") == "allow"
    for n in range(10):
        assert run("bash", {"command": f"grep -rn ttl{n} src"}, "") == "allow"
    assert run("bash", read, "<returncode>0</returncode>\nttl = 60") == "deny"


def test_mini_swe_agent_re_read_after_a_write_still_runs_however_far_back():
    run = run_through_engine(ReplayGuard(toolkits=["mini-swe-agent"]))
    read = {"command": "cat src/cache.py"}
    assert run("bash", read, "ttl = 60") == "allow"
    for n in range(8):
        assert run("bash", {"command": f"grep -rn ttl{n} src"}, "") == "allow"
    assert run("bash", {"command": "sed -i 's/60/600/' src/cache.py"}, "") == "allow"
    assert run("bash", {"command": "grep -rn ttl0 src"}, "") == "allow"
    assert run("bash", read, "ttl = 600") == "allow"


def test_the_toolkit_window_only_fills_in_an_unset_history_window():
    assert GuardConfig(toolkits=["mini-swe-agent"]).history_window == 50
    assert GuardConfig(toolkits=["mini-swe-agent"], history_window=7).history_window == 7
    # SWE-agent elides observations older than its last few: the default stays.
    assert GuardConfig(toolkits=["swe-agent"]).history_window == 5
    assert GuardConfig(toolkits=["langchain", "mini-swe-agent"]).history_window == 50
    added = GuardConfig().model_copy(update={"toolkits": ("mini-swe-agent",)})
    assert added.history_window == 50
    assert added.model_copy(update={"toolkits": ()}).history_window == 5
    loaded = GuardConfig.model_validate(json.loads(added.model_dump_json()))
    assert loaded.history_window == 50


def _trajectory(calls: list[tuple[str, dict, str]]) -> str:
    return json.dumps(
        {
            "id": "run-1",
            "model": "m",
            "calls": [{"name": n, "args": a, "result": r} for n, a, r in calls],
        }
    )


def test_show_missed_lists_each_missed_read_with_its_reason(tmp_path: Path, capsys):
    read = ("bash", {"command": "cat a.py"}, "x = 1")
    others = [("bash", {"command": f"grep -n v{n} a.py"}, f"{n}") for n in range(6)]
    clock = ("bash", {"command": "date"}, "Mon")
    data = tmp_path / "runs.jsonl"
    data.write_text(_trajectory([read, *others, read, clock, clock]) + "\n")
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"tools": {"bash": {"preset": "shell"}}}))
    base = ["eval", str(data), "--policy", str(policy)]
    assert main([*base, "--show-missed", "5"]) == 0
    out = capsys.readouterr().out
    assert "Missed repeated reads (2: volatile 1, window 1; first 2)" in out
    assert "call   7 bash (redundant_read, window)" in out
    assert "history_window=5" in out
    assert "call   9 bash (volatile_read, volatile)" in out
    assert main([*base, "--json"]) == 0
    missed = json.loads(capsys.readouterr().out)["missed_reads"]
    assert [(m["call_index"], m["reason"], m["earlier_index"]) for m in missed] == [
        (7, "window", 0),
        (9, "volatile", 8),
    ]
    # Within the window, the same re-read is caught: nothing is listed.
    data.write_text(_trajectory([read, *others[:2], read]) + "\n")
    assert main([*base, "--show-missed", "5"]) == 0
    assert "Missed repeated reads (0: none" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("edit", {"start_line": 1, "end_line": 1, "replacement": "package app;"}),
        ("insert", {"text": "import java.util.List;", "line": 2}),
    ],
)
def test_swe_agent_same_edit_after_another_open_is_a_new_call(tool: str, args: dict):
    # SWE-agent's edit and insert act on the file open in the viewer: after `open` of
    # another file the identical call edits another file (SWE-agent Java runs).
    run = run_through_engine(ReplayGuard(toolkits=["swe-agent"]))
    for name in ("A", "B", "C", "D", "E", "F"):
        assert run("open", {"path": f"{name}.java"}, f"[File: {name}.java]") == "allow"
        shown = f"[File: /repo/{name}.java (40 lines total)]\n1:package app;"
        assert run(tool, args, shown) == "allow"


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("edit", {"start_line": 1, "end_line": 1, "replacement": "package app;"}),
        ("insert", {"text": "import java.util.List;", "line": 2}),
    ],
)
def test_swe_agent_same_edit_of_the_same_file_again_and_again_is_stopped(tool: str, args: dict):
    run = run_through_engine(ReplayGuard(toolkits=["swe-agent"]))
    assert run("open", {"path": "A.java"}, "[File: A.java]") == "allow"
    shown = "[File: /repo/A.java (40 lines total)]\n1:package app;"
    verdicts = [run(tool, args, shown) for _ in range(6)]
    assert verdicts[:4] == ["allow"] * 4  # the first result, then 3 repeats of it
    assert "allow" not in verdicts[4:]


def test_mini_swe_agent_cd_lasts_one_call_so_a_cd_chain_of_reads_is_a_read():
    # mini-swe-agent runs each action in a new subprocess: `cd` changes nothing the next
    # call sees, so a re-read through the same `cd` is a duplicate...
    run = run_through_engine(ReplayGuard(toolkits=["mini-swe-agent"]))
    read = {"command": "cd /testbed && grep -n ttl src/cache.py"}
    assert run("bash", read, "12: ttl = 60") == "allow"
    assert run("bash", {"command": "cd /testbed"}, "") == "allow"
    assert run("bash", read, "12: ttl = 60") == "deny"
    # ...while a write through a `cd` is still a write, and the re-read after it runs.
    write = {"command": "cd /testbed && sed -i 's/60/600/' src/cache.py"}
    assert run("bash", write, "") == "allow"
    assert run("bash", read, "12: ttl = 600") == "allow"


def test_in_a_persistent_shell_cd_still_starts_a_new_epoch():
    # OpenHands keeps one shell session: `cd` changes what later relative reads read.
    run = run_through_engine(ReplayGuard(toolkits=["openhands"]))
    read = {"command": "grep -n ttl cache.py"}
    assert run("execute_bash", read, "12: ttl = 60") == "allow"
    assert run("execute_bash", {"command": "cd /other"}, "") == "allow"
    assert run("execute_bash", read, "3: ttl = 5") == "allow"
