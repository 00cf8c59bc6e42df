"""Calibration agrees with the guard on what a loop is, needs loops, and keeps what holds out."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.calibration import calibrate, find_loops, score
from langgraph_replay_guard.cli.main import main
from langgraph_replay_guard.evaluation import evaluate_trajectories

# Samples of ../shared/data (tau-tune.jsonl, mini-swe-tune.jsonl; MIT): see make_samples.py.
SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "calibration"


def load(name: str) -> list[dict]:
    lines = (SAMPLES / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


@pytest.fixture(scope="module")
def tau_policy() -> GuardConfig:
    # The package's copy of ../shared/data/tau-tools.json.
    data = resources.files("langgraph_replay_guard") / "data" / "tau_tools.json"
    with resources.as_file(data) as path:
        return GuardConfig().with_policies(path)


@pytest.fixture(scope="module")
def no_cycles(tau_policy) -> GuardConfig:
    # Since a failed write starts a new epoch (issue 35), the `think` between the slice's
    # failing book_reservation calls runs again, and the default guard stops the loop by
    # its cycle as early as max_repeats=2 would: nothing to fit. Without cycle detection
    # the slice still fits max_repeats=2, which the held-out check must refuse.
    return tau_policy.model_copy(update={"cycle_detection": False})


def call(name, args, result, turn=0):
    return {"name": name, "args": args, "result": result, "turn": turn}


def transfers(ident: str, times: int) -> dict:
    """A tau2 run that hands the user over, again and again, getting the same answer."""
    return {
        "id": ident,
        "model": "m",
        "calls": [
            call("get_customer_by_phone", {"phone_number": "555-0100"}, "{'customer_id': 'C1'}"),
            *[call("transfer_to_human_agents", {"summary": "stuck"}, "Transfer successful")]
            * times,
        ],
    }


def test_an_identical_successful_unsafe_call_repeated_is_a_loop(tau_policy):
    """Issue 35 repro 1: the guard's stop at the 4th identical transfer is a loop stopped."""
    runs = [transfers("t1", 4), transfers("t2", 6), transfers("t3", 100)]
    assert tau_policy.policy_for("transfer_to_human_agents").replay == "unsafe"
    loops = find_loops(runs, tau_policy)
    assert loops == [frozenset({0})] * 3
    defaults, _ = score(runs, loops, tau_policy)
    assert (defaults.loops, defaults.loops_stopped, defaults.healthy_stopped) == (3, 3, 0)
    # The eval scores the stopped transfer as redundant (the same result again), not wrong.
    report = evaluate_trajectories(runs, tau_policy)
    assert report.total.aborts == 3
    assert report.total.wrong == 0
    # So calibration has nothing to loosen (it used to raise max_repeats to let them run).
    result = calibrate(runs, tau_policy)
    assert result.config.max_repeats <= 3
    own = result.config.policy_for("transfer_to_human_agents").max_repeats
    assert own is None or own <= 3
    assert result.score.loops_stopped == 3
    assert result.score.healthy_stopped == 0
    # A write between them (another tool's) may change the answer: not a loop.
    # (Each round answers otherwise: the same answers each round would be a cycle, a loop.)
    toggled = {
        "id": "w",
        "calls": [
            c
            for n in range(4)
            for c in (
                call("transfer_to_human_agents", {"summary": "stuck"}, "Transfer successful"),
                call("toggle_data", {}, f"Mobile Data is now ON ({n})"),
                call("toggle_data", {}, f"Mobile Data is now OFF ({n})"),
            )
        ],
    }
    assert find_loops([toggled], tau_policy) == [frozenset()]


def test_loop_free_coding_runs_keep_every_loop_threshold(tmp_path, capsys):
    """Issue 35 repro 2: 21 loop-free coding runs loosen nothing, and the exit says so."""
    path = SAMPLES / "mini-swe-loop-free.jsonl"
    base = GuardConfig(toolkits=("mini-swe-agent",))
    runs = load(path.name)
    assert len(runs) == 21
    assert not any(find_loops(runs, base))
    result = calibrate(runs, base)
    for name in ("max_repeats", "history_window", "max_same_failures", "max_cycle_period"):
        assert getattr(result.config, name) == getattr(base, name), name
    assert not [change for change in result.changes if not change[0].endswith(".volatile")]
    out = tmp_path / "out.json"
    argv = ["eval", str(path), "--toolkit", "mini-swe-agent", "--calibrate", str(out)]
    assert main(argv) == 1
    text = capsys.readouterr().out
    assert "No run has a loop: every loop threshold is kept" in text
    assert "--allow-no-loops" in text
    assert GuardConfig.from_file(out).history_window == base.history_window
    assert main([*argv, "--allow-no-loops"]) == 0


def test_a_one_model_slice_does_not_fit_a_threshold_the_held_out_runs_refute(tau_policy, no_cycles):
    """Issue 35 repro 3: 50 gpt-4o runs with one book_reservation loop.

    Stopping that loop a call earlier (max_repeats 2, for every tool or for book_reservation)
    ranks best on the slice, and stops the two unseen payment runs that succeed on their
    next identical try.
    """
    slice_, payment = load("tau-gpt4o-slice.jsonl"), load("tau-gpt4o-payment.jsonl")
    assert len(slice_) == 50
    assert {run["model"] for run in slice_} == {"gpt-4o"}
    # The defaults stop the slice's loop by its cycle: nothing to fit, nothing changed.
    assert calibrate(slice_, tau_policy).changes == []
    tau_policy = no_cycles
    result = calibrate(slice_, tau_policy)
    assert result.config.max_repeats != 2
    assert result.config.policy_for("book_reservation").max_repeats in (None, 3)
    held = find_loops(payment, tau_policy)
    assert not any(held)
    defaults, _ = score(payment, held, tau_policy)
    calibrated, _ = score(payment, held, result.config)
    assert defaults.healthy_stopped == 0
    assert calibrated.healthy_stopped <= defaults.healthy_stopped
    # max_repeats=2 was proposed on the choosing part, and dropped: nothing held out gains.
    dropped = [c for c in result.checks if c.setting == "max_repeats" and not c.kept]
    assert dropped
    assert dropped[0].why.startswith("no gain on the held-out part")


def _holds(result, runs, base) -> None:
    loops = find_loops(runs, base)
    defaults, _ = score(runs, loops, base)
    calibrated, _ = score(runs, loops, result.config)
    assert calibrated.healthy_stopped <= defaults.healthy_stopped
    assert calibrated.loops_stopped >= defaults.loops_stopped
    assert calibrated.wrong <= defaults.wrong


@pytest.mark.parametrize("direction", ["tau on tau2", "tau2 on tau"])
def test_calibrated_on_one_benchmark_holds_on_the_other(tau_policy, direction):
    """Done when: tau-bench runs calibrated, checked on tau2 runs, and the reverse (samples).

    `benchmarks/calibrate_split.py` runs the same check on the whole of tau-tune.
    """
    tau = load("tau-gpt4o-slice.jsonl") + load("tau-gpt4o-payment.jsonl")
    tau2 = load("tau2-sample.jsonl")
    chosen, held = (tau, tau2) if direction == "tau on tau2" else (tau2, tau)
    result = calibrate(chosen, tau_policy)
    _holds(result, held, tau_policy)
    # And on its own held-out part.
    assert result.held_out is not None
    assert result.held_out.runs > 0
    for part in (result.held_out, result.chosen):
        assert part.calibrated.healthy_stopped <= part.base.healthy_stopped
        assert part.calibrated.loops_stopped >= part.base.loops_stopped
        assert part.calibrated.wrong <= part.base.wrong


def test_the_split_is_by_run_stratified_and_deterministic(tau_policy):
    from langgraph_replay_guard.calibration import split_runs

    runs = load("tau2-sample.jsonl")
    loops = find_loops(runs, tau_policy)
    chosen, held = split_runs(runs, loops, 0.5)
    assert sorted(chosen + held) == list(range(len(runs)))
    assert (chosen, held) == split_runs(list(reversed(runs))[::-1], loops, 0.5)
    # Every model, and the runs with a loop, on both sides.
    for part in (chosen, held):
        assert {runs[i]["model"] for i in part} == {run["model"] for run in runs}
        assert any(loops[i] for i in part)
    # A lone run with a loop is weighed, on the choosing side; no share holds nothing out.
    assert split_runs(runs[:1], [frozenset({0})], 0.5) == ([0], [])
    assert split_runs(runs, loops, 0) == (list(range(len(runs))), [])
    with pytest.raises(ValueError, match="holdout=1"):
        split_runs(runs, loops, 1)


def test_the_report_shows_both_parts_and_each_change_held_out(tmp_path, capsys):
    data = tmp_path / "runs.jsonl"
    data.write_text((SAMPLES / "tau-gpt4o-slice.jsonl").read_text(encoding="utf-8"))
    config = tmp_path / "guard.json"
    config.write_text(json.dumps({"cycle_detection": False}))  # see `no_cycles`
    tools = resources.files("langgraph_replay_guard") / "data" / "tau_tools.json"
    with resources.as_file(tools) as policy:
        argv = ["eval", str(data), "--policy", str(policy), "--config", str(config)]
        argv += ["--calibrate", str(tmp_path / "o")]
        assert main(argv) == 0
    text = capsys.readouterr().out
    assert "A loop: the same call (same tool, same arguments" in text
    assert "whatever the tool's class" in text
    assert "held out (" in text
    assert "chosen on (" in text
    assert "each checked alone on the held-out part" in text
    assert "max_repeats 3 -> 2" in text
    assert "dropped: no gain on the held-out part" in text
    assert "Evidence short: a tool's own max_repeats needs" in text
    # The json carries the same.
    assert main([*argv, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["held_out"]["runs"] > 0
    assert report["checks"][0]["kept"] is False
    assert "book_reservation" in report["short_evidence"]


def test_the_report_in_the_docs_is_the_one_the_command_prints(tmp_path, capsys, monkeypatch):
    """docs/tuning-with-eval.md shows `eval --calibrate` on the shipped sample as it prints."""
    docs = Path(__file__).resolve().parents[2] / "docs" / "tuning-with-eval.md"
    text = docs.read_text(encoding="utf-8")
    start = text.index("replay-guard eval --calibrate: 35 trajectories")
    shown = text[start : text.index("```", start)].splitlines()
    data = resources.files("langgraph_replay_guard") / "data"
    monkeypatch.chdir(tmp_path)
    with (
        resources.as_file(data / "tau_sample.jsonl") as sample,
        resources.as_file(data / "tau_tools.json") as tools,
    ):
        argv = ["eval", str(sample), "--policy", str(tools), "--calibrate", "calibrated.json"]
        assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    # Everything but the time the search took.
    assert [line for line in printed[: len(shown)] if not line.startswith("Searched ")] == [
        line for line in shown if not line.startswith("Searched ")
    ]


def test_eval_counts_loops_with_the_same_definition(tmp_path, capsys, tau_policy):
    runs = [transfers("t1", 4), transfers("t2", 6), {"id": "ok", **transfers("x", 1)}]
    data = tmp_path / "runs.jsonl"
    data.write_text("".join(json.dumps(run) + "\n" for run in runs))
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"tools": {"transfer_to_human_agents": "unsafe"}}))
    assert main(["eval", str(data), "--policy", str(policy)]) == 0
    text = capsys.readouterr().out
    assert "Runs with a loop: 2 of 3, stopped 2; runs without a loop stopped: 0" in text
    assert "whatever the tool's class" in text
    assert main(["eval", str(data), "--policy", str(policy), "--json", "--loop-calls", "5"]) == 0
    loops = json.loads(capsys.readouterr().out)["loops"]
    assert (loops["loop_calls"], loops["runs"], loops["stopped"]) == (5, 1, 1)
    # The guard stops the 4-transfer run at its 4th: a run without a 5-call loop stopped.
    assert loops["healthy_stopped_runs"] == ["t1"]


def test_holdout_0_keeps_what_the_search_chose_unchecked(no_cycles):
    slice_ = load("tau-gpt4o-slice.jsonl")
    result = calibrate(slice_, no_cycles, holdout=0)
    assert result.held_out is not None
    assert result.held_out.runs == 0
    assert result.config.max_repeats == 2, "the fit the held-out check drops by default"
    assert [c.why for c in result.checks] == ["not checked (--holdout 0)"]


def test_calibration_keeps_the_same_failure_layer_the_javac_loops_need():
    """The javac loops fail by the shell's own failure pattern: loops on both parts."""
    from langgraph_replay_guard.calibration import split_runs
    from langgraph_replay_guard.evaluation import RecordingReading

    data = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
    lines = (data / "openhands-synthetic.jsonl").read_text(encoding="utf-8").splitlines()
    runs = [json.loads(line) for line in lines if line.strip()]
    base = GuardConfig(toolkits=("openhands",))
    reading = RecordingReading(normalize=(r"in [0-9.]+s",))
    loops = find_loops(runs, base, reading)
    chosen, held = split_runs(runs, loops, 0.5)
    for part in (chosen, held):
        assert any(loops[i] and runs[i]["id"].startswith("loop-javac") for i in part)
        part_runs, part_loops = [runs[i] for i in part], [loops[i] for i in part]
        off = base.model_copy(update={"max_same_failures": 0})
        kept, _ = score(part_runs, part_loops, base, reading)
        dropped, _ = score(part_runs, part_loops, off, reading)
        assert dropped.loops_stopped < kept.loops_stopped
    result = calibrate(runs, base, reading)
    assert result.config.max_same_failures != 0
    assert result.score.loops_stopped == sum(map(bool, loops))
