"""`replay-guard eval` on a small fixture whose answers are known, and on the shipped sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.cli.main import main
from langgraph_replay_guard.evaluation import WRONG_PREVIEW_CHARS, evaluate_file

FIXTURES = Path(__file__).parent.parent / "fixtures"
SMALL = FIXTURES / "eval_small.jsonl"
TOOLS = FIXTURES / "eval_tools.json"


@pytest.fixture
def report():
    return evaluate_file(SMALL, GuardConfig().with_policies(TOOLS))


def test_totals(report):
    total = report.total
    assert total.trajectories == 3
    assert total.calls == 13
    assert total.blocked == 3
    assert total.redundant == 2, "the duplicate read and the 4th transfer"
    assert total.wrong == 1, "trajectory C's second read returned something new"
    assert total.aborts == 1
    assert total.cut == 2, "transfers 5 and 6 are never made; the next turn goes on"
    assert total.identical_repeats == 6
    assert total.caught == 4
    assert total.repeat_kinds == {"redundant_read": [1, 1], "side_effect": [5, 3]}
    assert total.by_reason == {"duplicate": 2, "repeat_limit": 1}


def test_per_model_and_per_tool(report):
    assert report.by_model["m1"].blocked == 1
    assert report.by_model["m2"].wrong == 1
    assert report.by_tool["transfer"].aborts == 1
    assert report.by_class["unsafe"].calls == 7


def test_abort_position(report):
    [abort] = report.aborts
    assert (abort.trajectory, abort.call_index, abort.tool, abort.reason) == (
        "B",
        3,
        "transfer",
        "repeat_limit",
    )


def test_malformed_lines_are_reported_and_skipped(report):
    assert [line for line, _ in report.malformed] == [2, 4]
    assert "not JSON" in report.malformed[0][1]
    assert "calls" in report.malformed[1][1]


def test_thread_scope_changes_the_answer():
    config = GuardConfig(exit_behavior="continue").with_policies(TOOLS)
    total = evaluate_file(SMALL, config).total
    assert total.cut == 0
    assert total.aborts == 0
    assert total.blocked == 5, "continue: transfers 4, 5 and 6 are each blocked"


def test_normalize_removes_volatile_noise(tmp_path):
    path = tmp_path / "t.jsonl"
    calls = [
        {"name": "status", "args": {}, "result": f"ok at 12:0{i}", "turn": 0} for i in range(2)
    ]
    path.write_text(json.dumps({"id": "n", "model": "m", "calls": calls}) + "\n")
    plain = evaluate_file(path, GuardConfig()).total
    cleaned = evaluate_file(path, GuardConfig(), normalize=[r"\d\d:\d\d"]).total
    assert (plain.identical_repeats, plain.wrong) == (0, 1)
    assert (cleaned.identical_repeats, cleaned.redundant) == (1, 1)


def test_cli_json_output(capsys):
    assert main(["eval", str(SMALL), "--policy", str(TOOLS), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total"]["blocked"] == 3
    assert data["total"]["wrong_rate"] == pytest.approx(1 / 3)
    assert data["aborts"][0]["call_index"] == 3
    assert [m["line"] for m in data["malformed"]] == [2, 4]


def test_cli_table_output(capsys):
    assert main(["eval", str(SMALL), "--policy", str(TOOLS)]) == 0
    out = capsys.readouterr().out
    assert "13 calls" in out
    assert "Wrong blocks: 1 of 3 blocked" in out
    assert "call   3 transfer (repeat_limit)\n      B\n" in out, "the run's id on its own line"


def test_cli_table_has_a_legend_for_its_columns(capsys):
    assert main(["eval", str(SMALL), "--policy", str(TOOLS)]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("model "))
    legend = {line.split()[0]: line for line in lines if line.startswith("  ") and line.split()}
    for column in ("runs", "blocked", "redundant", "wrong", "aborts", "cut", "cycles"):
        assert column in header.split()
        assert column in legend, f"no legend line for {column}"
    assert "after an abort" in legend["cut"]
    assert "class: the replay class" in "\n".join(lines)


def test_cli_never_cuts_ids_or_names(tmp_path, capsys):
    model = "ft:gpt-4.1-2025-04-14:sierra:tau2-full-sft:BzrYdMNm-and-then-some"
    tool = "check_data_restriction_status_of_the_customer_line"
    run_id = "-14_sierra_tau2-full-sft_telecom.json:task[mms_issue]airplane_mode_on|" + "x" * 150
    call = {"name": tool, "args": {"id": 1}, "result": "same", "turn": 0}
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"id": run_id, "model": model, "calls": [call] * 6}) + "\n")
    assert main(["eval", str(path)]) == 0
    out = capsys.readouterr().out
    assert "..." not in out
    lines = out.splitlines()
    assert model in lines, "a long model name gets a line of its own"
    assert tool in lines
    assert f"      {run_id}" in lines
    # The numbers of a name on its own line follow on the next line, in their columns.
    numbers = lines[lines.index(model) + 1].split()
    assert numbers == ["1", "6", "3", "3", "0", "1", "2", "0"]


def test_the_demo_hint_runs_from_a_clone_after_make_demo(monkeypatch):
    from langgraph_replay_guard.cli import demo_cmd

    root = Path(__file__).resolve().parents[2]
    monkeypatch.chdir(root)
    monkeypatch.setattr("sys.argv", [".venv/bin/replay-guard", "demo"])
    monkeypatch.setattr("shutil.which", lambda _name: None)  # the venv is not activated
    assert demo_cmd.eval_command() == (
        ".venv/bin/replay-guard eval langgraph_replay_guard/data/tau_sample.jsonl "
        "--policy langgraph_replay_guard/data/tau_tools.json"
    )
    monkeypatch.setattr("shutil.which", lambda _name: str(root / ".venv/bin/replay-guard"))
    monkeypatch.setattr("sys.argv", [str(root / ".venv/bin/replay-guard"), "demo"])
    assert demo_cmd.eval_command().startswith("replay-guard eval "), "on PATH: its name"


def test_cli_config_file(tmp_path, capsys):
    config = tmp_path / "guard.json"
    config.write_text('{"max_repeats": 10}')
    assert (
        main(["eval", str(SMALL), "--policy", str(TOOLS), "--config", str(config), "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out)["total"]["aborts"] == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "missing.json"], "no such file"),
        (["--config", "{bad}"], "no such file"),
    ],
)
def test_cli_bad_files_exit_2_with_a_message(extra, message, capsys):
    with pytest.raises(SystemExit) as info:
        main(["eval", str(SMALL), *extra])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_invalid_config_names_the_field(tmp_path, capsys):
    config = tmp_path / "guard.json"
    config.write_text('{"history_window": -3}')
    with pytest.raises(SystemExit):
        main(["eval", str(SMALL), "--config", str(config)])
    assert "history_window" in capsys.readouterr().err


def test_cli_missing_trajectories(capsys):
    with pytest.raises(SystemExit):
        main(["eval", "does-not-exist.jsonl"])
    assert "no such file: does-not-exist.jsonl" in capsys.readouterr().err


def test_defaults_on_shipped_sample_catch_redundant_reads():
    """The shipped sample is a slice of the tuning set: redundant reads are caught."""
    from importlib import resources

    data = resources.files("langgraph_replay_guard") / "data"
    with resources.as_file(data / "tau_tools.json") as tools:
        config = GuardConfig().with_policies(tools)
    with resources.as_file(data / "tau_sample.jsonl") as sample:
        total = evaluate_file(sample, config).total
    assert total.kind_rate("redundant_read") >= 0.95
    assert total.wrong == 0


SHARED = Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.mark.skipif(not (SHARED / "tau-tune.jsonl").exists(), reason="../shared/data not present")
def test_defaults_on_the_tuning_set():
    """The issue's target on tau-tune.jsonl with tau-tools.json (533 runs, 4,491 calls)."""
    config = GuardConfig().with_policies(SHARED / "tau-tools.json")
    total = evaluate_file(SHARED / "tau-tune.jsonl", config).total
    assert total.calls == 4491
    assert total.kind_rate("redundant_read") >= 0.95
    assert total.wrong_rate() is not None
    assert total.wrong_rate() < 0.01
    # Every runaway loop of the set (the same call tens of times) ends in an abort.
    assert total.aborts >= 5
    assert total.cut >= 350


# -- dedup blocks apart from loop stops, and the wrong ones listed ---------------------------

LAYERED_POLICY = {"tools": {"read": "pure", "transfer": "unsafe"}}  # status: in the config
# A volatile poll answered from its earlier result only because it opts into short-circuits.
STATUS_POLICY = {"status": {"replay": "pure", "volatile": True, "short_circuit": True}}


def _call(name, args, result, turn=0):
    return {"name": name, "args": args, "result": result, "turn": turn}


LAYERED = [
    {
        "id": "dedup-run",
        "model": "m",
        "calls": [
            _call("read", {"id": 1}, "v1"),
            _call("read", {"id": 1}, "v2"),  # 1: duplicate, and the real result was new: wrong
            _call("read", {"id": 2}, "same"),
            _call("read", {"id": 2}, "same"),  # 3: duplicate, nothing lost: redundant
        ],
    },
    {
        "id": "poll-run",
        "model": "m",
        "calls": [
            _call("status", {}, "busy"),
            _call("status", {}, "busy"),
            # 2: same_result after "busy" twice (short_circuit=True on a volatile poll, opted
            # into): a wrong dedup block
            _call("status", {}, "done"),
        ],
    },
    {
        "id": "loop-run",
        "model": "m",
        "calls": [_call("transfer", {"to": "bob"}, "sent")] * 5,  # 3: repeat_limit, abort
    },
]


@pytest.fixture
def layered(tmp_path):
    trajectories = tmp_path / "layered.jsonl"
    trajectories.write_text("".join(json.dumps(t) + "\n" for t in LAYERED))
    policy = tmp_path / "tools.json"
    policy.write_text(json.dumps(LAYERED_POLICY))
    config = GuardConfig(tools=STATUS_POLICY)
    return trajectories, policy, config.with_policies(policy)


def _layered_argv(trajectories: Path, policy: Path, _: GuardConfig) -> list[str]:
    """`replay-guard eval` on the layered runs, the status poll's policy in a config file."""
    config = policy.parent / "guard.json"
    config.write_text(json.dumps({"tools": STATUS_POLICY}))
    return ["eval", str(trajectories), "--policy", str(policy), "--config", str(config)]


def test_dedup_blocks_are_counted_apart_from_loop_stops(layered):
    trajectories, _, config = layered
    report = evaluate_file(trajectories, config)
    total = report.total
    assert total.by_reason == {"duplicate": 2, "same_result": 1, "repeat_limit": 1}
    assert (total.blocked, total.redundant, total.wrong) == (4, 2, 2)
    assert (total.dedup.blocked, total.dedup.redundant, total.dedup.wrong) == (3, 1, 2)
    assert (total.stops.blocked, total.stops.redundant, total.stops.wrong) == (1, 1, 0)
    assert total.wrong_by_reason == {"duplicate": 1, "same_result": 1}
    assert total.dedup_wrong_rate() == pytest.approx(2 / 3)
    read, status, transfer = (report.by_tool[n] for n in ("read", "status", "transfer"))
    assert (read.dedup.blocked, read.dedup.wrong, read.stops.blocked) == (2, 1, 0)
    assert (status.dedup.blocked, status.dedup.wrong) == (1, 1)
    assert (transfer.dedup.blocked, transfer.stops.blocked, transfer.stops.wrong) == (0, 1, 0)


def test_every_wrong_block_is_listed_with_both_results(layered):
    trajectories, _, config = layered
    wrong = evaluate_file(trajectories, config).wrong_blocks
    assert [(w.trajectory, w.call_index, w.tool, w.reason, w.layer) for w in wrong] == [
        ("dedup-run", 1, "read", "duplicate", "dedup"),
        ("poll-run", 2, "status", "same_result", "dedup"),
    ]
    first, second = wrong
    assert (first.args, first.earlier_index, first.earlier_result, first.result) == (
        '{"id": 1}',
        0,
        "v1",
        "v2",
    )
    assert (second.earlier_index, second.earlier_result, second.result) == (1, "busy", "done")


def test_wrong_block_previews_are_short(tmp_path):
    long_args = {"query": "x" * 500}
    calls = [_call("read", long_args, "a" * 1000), _call("read", long_args, "b" * 1000)]
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"id": "r", "model": "m", "calls": calls}) + "\n")
    [block] = evaluate_file(path, GuardConfig()).wrong_blocks
    for text in (block.args, block.earlier_result, block.result):
        assert text is not None
        assert len(text) == WRONG_PREVIEW_CHARS
        assert text.endswith("...")


def test_cli_json_has_the_layers_and_the_wrong_blocks(layered, capsys):
    argv = _layered_argv(*layered)
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    total = data["total"]
    assert (total["blocked"], total["redundant"], total["wrong"]) == (4, 2, 2)  # unchanged
    assert (total["dedup"]["blocked"], total["dedup"]["redundant"], total["dedup"]["wrong"]) == (
        3,
        1,
        2,
    )
    assert (total["stops"]["blocked"], total["stops"]["redundant"], total["stops"]["wrong"]) == (
        1,
        1,
        0,
    )
    assert total["wrong_by_reason"] == {"duplicate": 1, "same_result": 1}
    assert total["dedup_wrong_rate"] == pytest.approx(2 / 3)
    assert data["by_tool"]["read"]["dedup"]["wrong"] == 1
    assert data["dedup_reasons"] == ["duplicate", "same_result"]
    assert data["wrong_blocks"][0] == {
        "trajectory": "dedup-run",
        "model": "m",
        "call_index": 1,
        "tool": "read",
        "reason": "duplicate",
        "layer": "dedup",
        "args": '{"id": 1}',
        "earlier_index": 0,
        "earlier_result": "v1",
        "result": "v2",
    }


def test_cli_table_shows_the_layers_per_tool_and_the_wrong_blocks(layered, capsys):
    argv = _layered_argv(*layered)
    assert main([*argv, "--show-wrong", "1"]) == 0
    out = capsys.readouterr().out
    assert "Blocks by layer: dedup 3 (2 wrong), loop stops 1 (0 wrong)" in out
    lines = out.splitlines()
    assert lines[lines.index("  tool      dedup  wrong  stops  wrong   stop reasons") + 1 :][
        :3
    ] == [
        "  read          2      1      0      0",
        "  status        1      1      0      0",
        "  transfer      0      0      1      0   repeat_limit 1",
    ]
    assert (
        "Wrong blocks (2; first 1), each with its run's id below:\n"
        '  call   1 read (duplicate) {"id": 1}\n'
        "      earlier (call 0): v1\n"
        "      real (call 1): v2\n"
        "      dedup-run\n"
    ) in out
    assert "poll-run" not in out

    assert main([*argv, "--show-wrong", "0"]) == 0
    assert "Wrong blocks (" not in capsys.readouterr().out


def test_shipped_sample_layers_add_up(capsys):
    """On the shipped sample, dedup blocks and loop stops make up every block, per tool too."""
    root = Path(__file__).resolve().parents[2]
    data = root / "langgraph_replay_guard" / "data"
    argv = ["eval", str(data / "tau_sample.jsonl"), "--policy", str(data / "tau_tools.json")]
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    tallies = [report["total"], *report["by_tool"].values(), *report["by_model"].values()]
    for t in tallies:
        assert t["dedup"]["blocked"] + t["stops"]["blocked"] == t["blocked"]
        assert t["dedup"]["redundant"] + t["stops"]["redundant"] == t["redundant"]
        assert t["dedup"]["wrong"] + t["stops"]["wrong"] == t["wrong"]
        dedup = sum(n for r, n in t["by_reason"].items() if r in report["dedup_reasons"])
        assert dedup == t["dedup"]["blocked"]
    total = report["total"]
    assert (total["dedup"]["blocked"], total["stops"]["blocked"]) == (
        12,
        7,
    )  # a failed write starts an epoch (issue 35)
    assert total["dedup"]["wrong"] == total["stops"]["wrong"] == 0
    assert report["wrong_blocks"] == []
