"""`replay-guard eval` with toolkits, on the SYNTHETIC SWE-agent-style trajectories."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.cli.main import main
from langgraph_replay_guard.evaluation import EvalReport, evaluate_file

DATA = Path(__file__).parent.parent.parent / "benchmarks" / "data"
TRAJECTORIES = DATA / "swe-synthetic.jsonl"
NORMALIZE = [r"in [0-9.]+s"]
REDUNDANT, LOOKALIKE = "synthetic-swe-redundant", "synthetic-swe-lookalike"


def evaluate(config: GuardConfig) -> EvalReport:
    return evaluate_file(TRAJECTORIES, config, normalize=NORMALIZE)


def test_the_swe_agent_toolkit_catches_the_redundant_reads_with_no_wrong_block():
    unsafe = evaluate(GuardConfig().with_policies(DATA / "swe-unsafe.json"))
    toolkit = evaluate(GuardConfig(toolkits=["swe-agent"]))
    before, after = unsafe.by_model[REDUNDANT], toolkit.by_model[REDUNDANT]
    assert before.identical_repeats == after.identical_repeats == 22
    assert before.caught == 0  # unsafe tools: identical repeats are only counted
    assert after.caught == 22
    assert after.kind_rate("redundant_read") == 1.0
    # No wrong block, before or after, and nothing of the look-alike runs is blocked.
    assert unsafe.total.wrong == toolkit.total.wrong == 0
    assert toolkit.by_model[LOOKALIKE].blocked == 0
    # Paging is never deduplicated: every viewer call ran.
    for tool in ("open", "goto", "scroll_up", "scroll_down"):
        assert set(toolkit.by_tool_class[tool]) == {"pure volatile"}
        assert toolkit.by_tool[tool].blocked == 0


def test_without_a_policy_the_viewers_are_blocked_wrongly():
    report = evaluate(GuardConfig())
    assert report.by_model[LOOKALIKE].blocked > 0
    assert report.total.wrong > 0
    assert report.by_tool["scroll_down"].wrong > 0


def test_cli_toolkit_flag_and_config_file_give_the_same_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    base = ["eval", str(TRAJECTORIES), "--normalize", NORMALIZE[0], "--json"]
    assert main([*base, "--toolkit", "swe-agent"]) == 0
    by_flag = json.loads(capsys.readouterr().out)
    config = tmp_path / "guard.json"
    config.write_text(json.dumps({"toolkits": ["swe-agent"]}))
    assert main([*base, "--config", str(config)]) == 0
    by_file = json.loads(capsys.readouterr().out)
    assert by_flag == by_file
    assert by_flag["by_model"][REDUNDANT]["caught"] == 22
    assert by_flag["total"]["wrong"] == 0
    # The policy file's entries win over the toolkit's: unsafe tools stay unsafe.
    policy = ["--policy", str(DATA / "swe-unsafe.json")]
    assert main([*base, *policy, "--toolkit", "swe-agent"]) == 0
    assert json.loads(capsys.readouterr().out)["by_model"][REDUNDANT]["caught"] == 0


def test_cli_unknown_toolkit_names_the_known_ones(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as stop:
        main(["eval", str(TRAJECTORIES), "--toolkit", "sweagent"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "--toolkit sweagent: unknown toolkit" in err
    assert "swe-agent" in err


def test_the_same_edit_in_each_file_opened_in_turn_is_never_stopped():
    # SWE-agent's `edit` edits the file open in the viewer: the same `edit 1:1 ...` after
    # `open` of another file is another edit (issue 35: SWE-agent Java runs were stopped).
    runs = {f"swe-lookalike-edit-each-file-{i}" for i in range(3)}
    presets = evaluate(GuardConfig().with_policies(DATA / "coding-presets.json"))
    assert {a.trajectory for a in presets.aborts} == runs  # edits unsafe, nothing more
    toolkit = evaluate(GuardConfig(toolkits=["swe-agent"]))
    assert toolkit.aborts == []
    assert toolkit.by_tool["edit"].blocked == 0
    assert set(toolkit.by_tool_class["edit"]) == {"unsafe volatile"}


def test_the_toolkit_table_counts_loops_with_the_loop_definition():
    """Issue 35: the runs that loop are `find_loops`'s, not the ids' labels (which agree)."""
    path = DATA.parent / "eval_toolkits.py"
    spec = importlib.util.spec_from_file_location("eval_toolkits", path)
    assert spec is not None
    assert spec.loader is not None
    eval_toolkits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(eval_toolkits)
    rows = eval_toolkits.toolkit_rows(mini_swe=None)
    assert len(rows) == len(eval_toolkits.SETS)
    for toolkit, name, report, labelled in rows:
        loops = report.loops
        assert loops is not None, name
        assert loops.runs == len(labelled), name
        assert loops.stopped == loops.runs, name
        assert loops.healthy_stopped == 0, (name, loops.healthy_stopped_runs)
        assert report.total.wrong == 0, name
        assert eval_toolkits._disagreements(name, DATA / name, toolkit, labelled) == []
