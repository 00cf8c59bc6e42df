"""Issue 35 attacked: coding toolkits never answer a changed read, calibration splits by content.

Each test here broke what issue 35 promises on the merged fix (d0d2388). The four that were
strict xfails (a disagreement between the loop definition, `find_loops`, and the guard) pass
since branch i35-finish: the failure pattern, cycles, failed writes and background jobs.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.calibration import find_loops
from langgraph_replay_guard.cli.main import main
from langgraph_replay_guard.decisions.engine import Verdict
from langgraph_replay_guard.evaluation import DEFAULT_ERROR_PATTERN, evaluate_trajectories

# Each agent's shell tool, in its toolkit.
SHELLS = {"mini-swe-agent": "bash", "swe-agent": "bash", "openhands": "execute_bash"}

# Command lines that write `f` (or may: an unknown program), however they look.
WRITES = [
    "sed -i 's/old/new/' f",
    "sed -e 's/old/new/' -i f",
    "sed --in-place 's/old/new/' f",
    "sed -i.bak 's/old/new/' f",
    "perl -pi -e 's/old/new/' f",
    "echo new > f",
    "echo new >> f",
    "printf new | tee f",
    "cat g > f",
    ": > f",
    "cat > f <<'EOF'\nnew\nEOF",
    "python - <<'PY'\nopen('f', 'w').write('new')\nPY",
    "git checkout f",
    "git checkout -- f",
    "git stash",
    "git restore f",
    "git reset --hard",
    "git apply p.diff",
    "patch -p1 < p.diff",
    "find . -name f -delete",
    "find . -name g -exec cp {} f \\;",
    "ls g | xargs -I{} cp {} f",
    "cp g f",
    "mv g f",
    "truncate -s 0 f",
    "dd if=g of=f",
    "sort -o f f",
    "awk '{print > \"f\"}' g",
    'python -c \'open("f", "w").write("new")\'',
    'python3 -c \'import pathlib; pathlib.Path("f").write_text("new")\'',
    "python -c 'import os; os.system(\"echo new > f\")'",
    "python -c 'import os; print(os.system(\"echo new > f\"))'",
    "python -c 'import os as platform; platform.system(\"echo new > f\")'",
    "python fix.py",
    "ls; sed -i 's/old/new/' f",
    "ls && echo new > f",
    "(cd . && echo new > f)",
    "{ cat f; echo new > f; }",
    "cd . && sed -i 's/old/new/' f",
    "FOO=1 sed -i 's/old/new/' f",
    "env FOO=1 sed -i 's/old/new/' f",
    "export A=1 && echo new > f",
    "timeout 5 sed -i 's/old/new/' f",
    "bash -c 'echo new > f'",
    "sh -c \"sed -i 's/old/new/' f\"",
    "echo $(echo new > f)",
    "for x in 1; do echo new > f; done",
    "echo new > f &",
]

# Reads of `f`, plain and in the shapes agents type.
READS = ["cat f", "cd . && cat f", "head -n 5 f", "grep -n new f", "git diff f"]


def _run(tool: str, *calls: tuple[str, str]) -> dict:
    return {
        "id": "r",
        "model": "m",
        "calls": [{"name": tool, "args": {"command": c}, "result": r} for c, r in calls],
    }


@pytest.mark.parametrize("toolkit", sorted(SHELLS))
@pytest.mark.parametrize("write", WRITES)
def test_a_read_after_a_write_is_never_answered_with_the_old_result(toolkit, write):
    config = GuardConfig(toolkits=[toolkit])
    tool = SHELLS[toolkit]
    for read in READS:
        run = _run(tool, (read, "old"), (write, ""), (read, "new"))
        report = evaluate_trajectories([run], config)
        assert report.total.wrong == 0, (read, write, report.total.by_reason)


# Reads whose answer changes with nothing written: the shell's own changing variables, the
# kernel's random devices and live files.
CHANGING_READS = [
    "echo $RANDOM",
    "echo ${RANDOM}",
    "echo $$",
    "echo $SECONDS",
    "head -c 16 /dev/urandom | od -An -tx1",
    "od -An -N4 /dev/random",
    "cat /proc/loadavg",
    "cat /proc/meminfo | head -n 3",
    "ls /proc",
    "cat /sys/class/thermal/thermal_zone0/temp",
    "date",
    "ps aux",
]


@pytest.mark.parametrize("toolkit", sorted(SHELLS))
@pytest.mark.parametrize("read", CHANGING_READS)
def test_a_read_whose_answer_changes_on_its_own_is_not_deduplicated(toolkit, read):
    run = _run(SHELLS[toolkit], (read, "1"), (read, "2"), (read, "3"))
    report = evaluate_trajectories([run], GuardConfig(toolkits=[toolkit]))
    assert report.total.wrong == 0, report.total.by_reason


def test_look_alikes_of_changing_reads_are_still_deduplicated():
    config = GuardConfig(toolkits=["mini-swe-agent"])
    for read in ["cat src/sys/x.py", "cat ./proc/x", "cat /procedure.txt", "grep RANDOM_SEED f"]:
        run = _run("bash", (read, "same"), (read, "same"))
        assert evaluate_trajectories([run], config).total.by_reason == {"duplicate": 1}, read


def test_python_c_reads_from_platform_are_still_reads():
    config = GuardConfig(toolkits=["mini-swe-agent"])
    for code in ["import platform; print(platform.system())", "import sys; print(sys.version)"]:
        read = f"python -c '{code}'"
        run = _run("bash", (read, "Linux"), (read, "Linux"))
        assert evaluate_trajectories([run], config).total.by_reason == {"duplicate": 1}, read


def _shared_id_runs() -> list[dict]:
    """Two files' runs sharing ids: each id twice, with other calls (an odd number held out
    splits a pair)."""
    runs = []
    for times in (2, 1):
        for n in range(5):
            # File a's runs re-read (a call saved), file b's do not.
            calls = [{"name": "bash", "args": {"command": f"cat f{n}"}, "result": "x"}] * times
            runs.append({"id": f"run-{n}", "model": "m", "calls": calls})
    return runs


def test_the_split_does_not_depend_on_the_files_order_when_ids_repeat():
    from langgraph_replay_guard.calibration import split_runs  # new with the held-out check

    runs = _shared_id_runs()
    reordered = runs[5:] + runs[:5]
    config = GuardConfig()

    def held(trajectories: list[dict]) -> list[str]:
        _, out = split_runs(trajectories, find_loops(trajectories, config), 0.5)
        return sorted(json.dumps(trajectories[i], sort_keys=True) for i in out)

    assert held(runs) == held(reordered)


def test_the_calibration_file_does_not_depend_on_the_files_order(tmp_path: Path, capsys):
    runs = _shared_id_runs()
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in runs[:5]), encoding="utf-8")
    second.write_text("".join(json.dumps(r) + "\n" for r in runs[5:]), encoding="utf-8")
    outputs, tables = [], []
    for order in ((first, second), (second, first)):
        out = tmp_path / f"out-{order[0].stem}.json"
        argv = ["eval", *map(str, order), "--toolkit", "mini-swe-agent"]
        assert main([*argv, "--calibrate", str(out), "--allow-no-loops"]) == 0
        outputs.append(json.loads(out.read_text(encoding="utf-8")))
        text = capsys.readouterr().out
        assert "held out (5)" in text
        # The parts' figures (calls saved on each part) name the same runs.
        tables.append([line for line in text.splitlines() if line.startswith("calls saved")])
    assert outputs[0] == outputs[1]
    assert tables[0] == tables[1]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--loop-calls", "1", "--loop-calls 1: a loop needs at least 2 calls"),
        ("--loop-calls", "0", "--loop-calls 0: a loop needs at least 2 calls"),
        ("--show-missed", "-1", "--show-missed -1: give how many to list, 0 or more"),
        ("--show-wrong", "-2", "--show-wrong -2: give how many to list, 0 or more"),
        ("--show-aborts", "-1", "--show-aborts -1: give how many to list, 0 or more"),
    ],
)
def test_plain_eval_refuses_counts_that_make_no_sense(tmp_path, capsys, option, value, message):
    # Plain eval counts loops with --loop-calls too: with 1, every call was "a loop".
    path = tmp_path / "runs.jsonl"
    path.write_text(json.dumps(_run("bash", ("ls", "a"), ("ls", "a"))) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["eval", str(path), option, value])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_show_missed_on_runs_with_no_missed_read(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    run = _run("bash", ("cat f", "a"), ("cat f", "a"), ("ls", "f"))
    path.write_text(json.dumps(run) + "\n", encoding="utf-8")
    assert main(["eval", str(path), "--toolkit", "mini-swe-agent", "--show-missed", "5"]) == 0
    assert "Missed repeated reads (0: none; first 0)" in capsys.readouterr().out
    assert main(["eval", str(path), "--toolkit", "mini-swe-agent", "--show-missed", "0"]) == 0
    assert "Missed repeated reads" not in capsys.readouterr().out
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["eval", str(empty), "--show-missed", "5"])
    assert exc.value.code == 2
    assert "holds no trajectory" in capsys.readouterr().err


# -- the loop definition and the guard agree (were strict xfails) -----------------------------


def test_a_tool_failing_by_its_own_failure_pattern_again_and_again_is_a_loop():
    config = GuardConfig(toolkits=["swe-agent"])
    run = _run(
        "bash",
        *[(f"javac -{flag} Main.java", "bash: javac: command not found") for flag in "gOdpsv"],
    )
    loops = find_loops([run], config)
    report = evaluate_trajectories([run], config, loops=loops)
    assert report.total.aborts == 1  # the guard stops it: same_failure
    assert loops == [frozenset({0})]
    assert report.loops is not None
    assert report.loops.healthy_stopped == 0


def test_a_cycle_of_two_writes_with_the_same_results_is_a_loop():
    config = GuardConfig(toolkits=["mini-swe-agent"])
    pair = [("echo 'x = 1' > repro.py", ""), ("python repro.py", "Traceback ...\nwrong")]
    run = _run("bash", *(pair * 6))
    loops = find_loops([run], config)
    report = evaluate_trajectories([run], config, loops=loops)
    assert report.total.aborts == 1  # the guard stops it: cycle
    assert report.loops is not None
    assert report.loops.healthy_stopped == 0


def test_a_failed_write_may_have_written():
    config = GuardConfig(toolkits=["mini-swe-agent"])
    run = _run(
        "bash",
        ("cat a.py", "old"),
        ("sed -i 's/old/new/' a.py b.py", "Error: sed: can't read b.py"),
        ("cat a.py", "new"),
    )
    assert evaluate_trajectories([run], config).total.wrong == 0


@pytest.mark.parametrize("toolkit", sorted(SHELLS))
def test_a_log_read_again_while_a_background_job_writes_it_runs(toolkit):
    run = _run(
        SHELLS[toolkit],
        ("nohup python server.py > out.log 2>&1 &", "[1] 4242"),
        ("cat out.log", "starting"),
        ("sleep 5", ""),
        ("cat out.log", "starting\nready"),
    )
    assert evaluate_trajectories([run], GuardConfig(toolkits=[toolkit])).total.wrong == 0


# -- the guard and eval decide alike ----------------------------------------------------------

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "mini-swe-sample.jsonl.gz"


def _coding_runs() -> list[tuple[str, dict]]:
    found = []
    for toolkit, name in [
        ("swe-agent", "swe-synthetic.jsonl"),
        ("swe-agent", "coding-synthetic.jsonl"),
        ("swe-agent", "coding-same-failure.jsonl"),
        ("openhands", "openhands-synthetic.jsonl"),
    ]:
        lines = (DATA / name).read_text(encoding="utf-8").splitlines()
        found += [(toolkit, json.loads(line)) for line in lines if line.strip()]
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as lines:
        found += [("mini-swe-agent", json.loads(line)) for line in lines if line.strip()]
    return found


def test_the_guard_stops_and_blocks_where_eval_says_on_the_coding_sets():
    """Each run through the guard's own control, call by call, as a tool node would."""
    failed = re.compile(DEFAULT_ERROR_PATTERN, re.IGNORECASE)
    checked = 0
    for toolkit, run in _coding_runs():
        if len({call.get("turn", 0) for call in run["calls"]}) > 1:
            continue  # the control has no user turns
        control = ReplayGuard(toolkits=[toolkit]).control()
        blocked, abort_at = 0, None
        for index, call in enumerate(run["calls"]):
            decision = control.evaluate(call["name"], call["args"])
            text = str(call.get("result", ""))
            if decision.executes and failed.search(text):
                control.record_failure(call["name"], call["args"], error=text)
            elif decision.executes:
                control.record_success(call["name"], call["args"], result=text)
            else:
                blocked += 1
                control.record_denied(call["name"], call["args"], decision)
                if decision.verdict is Verdict.ABORT:
                    abort_at = index
                    break
        report = evaluate_trajectories([run], GuardConfig(toolkits=[toolkit]))
        said = report.aborts[0].call_index if report.aborts else None
        assert (blocked, abort_at) == (report.total.blocked, said), run["id"]
        checked += 1
    assert checked >= 90


# SWE-agent: commands that move the viewer, then one that reads or acts on the open file.
MOVES = [
    ("open", {"path": "b.py"}),
    ("open", {"path": "a.py", "line_number": 200}),
    ("goto", {"line_number": 300}),
    ("scroll_down", {}),
    ("scroll_up", {}),
    ("create", {"filename": "c.py"}),
]
ON_THE_OPEN_FILE = [
    ("search_file", {"search_term": "ttl"}),
    ("edit", {"start_line": 1, "end_line": 1, "replacement_text": "x = 1"}),
    ("edit", {"search": "ttl", "replace": "ttl2"}),
    ("insert", {"line_number": 1, "text": "import os"}),
    ("goto", {"line_number": 1}),
    ("scroll_down", {}),
]


@pytest.mark.parametrize(("move", "move_args"), MOVES)
@pytest.mark.parametrize(("act", "act_args"), ON_THE_OPEN_FILE)
def test_swe_agent_commands_on_the_open_file_follow_the_viewer(move, move_args, act, act_args):
    # The 4th identical act, each time on another file or window: no repeat of anything.
    calls = [("open", {"path": "a.py"}, "[File: a.py (300 lines)]"), (act, act_args, "a.py: 0")]
    for n in range(1, 4):
        calls += [(move, move_args, f"[File: view {n}]"), (act, act_args, f"view {n}: {n}")]
    run = {
        "id": "viewer",
        "model": "m",
        "calls": [{"name": n, "args": a, "result": r} for n, a, r in calls],
    }
    report = evaluate_trajectories([run], GuardConfig(toolkits=["swe-agent"]))
    assert report.total.wrong == 0, report.total.by_reason
    assert report.total.aborts == 0
