"""What the coding toolkits change on coding-agent runs, against the usual policies.

Run: python benchmarks/eval_toolkits.py [path/to/mini-swe-tune.jsonl]
First table: the `swe-agent` toolkit against three usual policies on SWE-agent-style runs.
Second: each agent's toolkit alone on the sets in its tool names: `mini-swe-agent` on the 239
real runs of mini-swe-tune (outside the repository: `../shared/data/mini-swe-tune.jsonl` of a
checkout, or the path given), `swe-agent` on the project's SYNTHETIC SWE-agent-named sets,
`openhands` on the SYNTHETIC runs in OpenHands' names: dedup blocks and the wrong ones, the
redundant reads caught (a pure read repeated with the same result, nothing written since),
the ones missed (`replay-guard eval --show-missed N` lists them with the reason), loop stops
and the wrong ones, the runs with a loop stopped, and the runs stopped that have no loop. Which
runs loop is read with the project's one loop definition (`find_loops`, as `replay-guard eval`
reads it); the generators' labels in the synthetic ids (`LOOP_RUNS`) are only compared with it
(a run where they disagree is printed).
Data: benchmarks/data/swe-synthetic.jsonl (SYNTHETIC trajectories; see
benchmarks/data/make_swe_synthetic.py). Its `synthetic-swe-redundant` runs ask again for what
they already have (every identical repeat there is a redundant read); its
`synthetic-swe-lookalike` runs only look like repeats (any block there is wrong). The same
numbers come from `replay-guard eval DATA --toolkit swe-agent --normalize 'in [0-9.]+s'`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.evaluation import (
    DEFAULT_LOOP_CALLS,
    EvalReport,
    evaluate_file,
    evaluate_trajectories,
    iter_trajectories,
)

DATA = Path(__file__).parent / "data"
TRAJECTORIES = DATA / "swe-synthetic.jsonl"
NORMALIZE = [r"in [0-9.]+s"]
REDUNDANT = "synthetic-swe-redundant"
LOOKALIKE = "synthetic-swe-lookalike"


def configs() -> list[tuple[str, GuardConfig]]:
    """The policies compared: before (three ways users set it up today) and after."""
    return [
        ("no policy (every tool pure)", GuardConfig()),
        ("SWE tools unsafe, bash shell", GuardConfig().with_policies(DATA / "swe-unsafe.json")),
        ("editor preset per tool", GuardConfig().with_policies(DATA / "coding-presets.json")),
        ('toolkits=["swe-agent"]', GuardConfig(toolkits=["swe-agent"])),
    ]


def evaluate(config: GuardConfig, path: Path = TRAJECTORIES) -> EvalReport:
    """The eval report of one configuration on the SWE-agent-style runs."""
    return evaluate_file(path, config, normalize=NORMALIZE)


# The runs the generators (benchmarks/data/make_*.py) made as loops: a weak agent repeating
# a failing call, paging forever, opening a missing file again and again. Only compared with
# the loop definition: the figures count the runs `find_loops` reads as loops.
LOOP_RUNS = ("loop-", "weak-", "swe-scroll-loop-", "swe-open-missing-")
# Each agent's toolkit alone on the sets in its tool names: SWE-agent's on the project's
# three SWE-agent-named sets, OpenHands' on those runs in OpenHands' names
# (make_openhands_synthetic.py), mini-swe-agent's on the 239 real runs of mini-swe-tune
# (kept outside the repository; see MINI_SWE_TUNE).
SETS: tuple[tuple[str, str], ...] = (
    ("swe-agent", "swe-synthetic.jsonl"),
    ("swe-agent", "coding-synthetic.jsonl"),
    ("swe-agent", "coding-same-failure.jsonl"),
    ("openhands", "openhands-synthetic.jsonl"),
)
MINI_SWE_TUNE = Path(__file__).resolve().parent.parent.parent / "shared/data/mini-swe-tune.jsonl"
"""Real mini-swe-agent runs (gemini-3-pro-preview, SWE-bench Verified; MIT): a checkout's
`../shared/data/mini-swe-tune.jsonl`, or the path given as the script's first argument."""


def evaluate_loops(config: GuardConfig, path: Path, normalize: list[str]) -> EvalReport:
    """The eval report of one set, its runs with a loop counted (`EvalReport.loops`)."""
    with open(path, "rb") as lines:
        report = EvalReport()
        runs = iter_trajectories(lines, report.malformed)
        return evaluate_trajectories(
            runs, config, normalize=normalize, report=report, loop_calls=DEFAULT_LOOP_CALLS
        )


def toolkit_rows(mini_swe: Path | None = None) -> list[tuple[str, str, EvalReport, set[str]]]:
    """Each agent's toolkit, alone, on each set: (toolkit, set, report, labelled loop ids).

    Which runs loop, and which were stopped, is in `report.loops` (the loop definition).
    The synthetic sets also label their loop runs in their ids (`LOOP_RUNS`), returned to be
    compared; mini-swe-tune's runs are real and unlabelled.
    """
    rows = []
    for toolkit, name in SETS:
        path = DATA / name
        ids = [json.loads(line)["id"] for line in path.read_text().splitlines()]
        labelled = {i for i in ids if i.startswith(LOOP_RUNS)}
        report = evaluate_loops(GuardConfig(toolkits=[toolkit]), path, NORMALIZE)
        rows.append((toolkit, name, report, labelled))
    if mini_swe is not None and mini_swe.is_file():
        report = evaluate_loops(GuardConfig(toolkits=["mini-swe-agent"]), mini_swe, [])
        rows.insert(0, ("mini-swe-agent", mini_swe.name + " (real)", report, set()))
    return rows


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def print_toolkit_rows(mini_swe: Path | None = MINI_SWE_TUNE) -> None:
    """The second table (see the module docstring)."""
    print(
        f"{'set':<32} {'toolkit':<15} {'dedup':>5} {'wrong':>5} {'reads caught':>14} "
        f"{'missed':>6} {'stops':>5} {'wrong':>5} {'loops stopped':>13} {'stopped, no loop':>16}"
    )
    notes = []
    for toolkit, name, report, labelled in toolkit_rows(mini_swe):
        total, loops = report.total, report.loops
        assert loops is not None
        reads, caught = total.repeat_kinds.get("redundant_read", [0, 0])
        rate = f"{caught}/{reads} {_rate(total.kind_rate('redundant_read'))}"
        missed = sum(m.kind == "redundant_read" for m in report.missed_reads)
        print(
            f"{name:<32} {toolkit:<15} {total.dedup.blocked:>5} {total.dedup.wrong:>5} "
            f"{rate:>14} {missed:>6} {total.stops.blocked:>5} {total.stops.wrong:>5} "
            f"{f'{loops.stopped}/{loops.runs}':>13} {loops.healthy_stopped:>16}"
        )
        if loops.healthy_stopped_runs:
            notes.append(f"{name}: stopped with no loop: {', '.join(loops.healthy_stopped_runs)}")
        if labelled:
            notes += _disagreements(name, DATA / name, toolkit, labelled)
    for note in notes:
        print(note)
    if mini_swe is not None and not mini_swe.is_file():
        print(f"({mini_swe} not found: mini-swe-agent row left out; give its path)")


def _disagreements(name: str, path: Path, toolkit: str, labelled: set[str]) -> list[str]:
    """Runs the generators labelled otherwise than the loop definition reads them."""
    from langgraph_replay_guard.evaluation import RecordingReading, find_loops

    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    reading = RecordingReading(normalize=tuple(NORMALIZE))
    found = find_loops(runs, GuardConfig(toolkits=[toolkit]), reading)
    looping = {run["id"] for run, turns in zip(runs, found, strict=True) if turns}
    notes = [f"{name}: labelled a loop, no loop by the definition: {i}" for i in labelled - looping]
    notes += [f"{name}: a loop by the definition, not labelled: {i}" for i in looping - labelled]
    return sorted(notes)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    mini_swe = Path(args[0]) if args else MINI_SWE_TUNE
    print(f"{TRAJECTORIES.name} (SYNTHETIC), normalize {NORMALIZE}")
    print(
        f"{'policy':<30} {'redundant reads caught':>22} {'look-alikes blocked':>19} "
        f"{'wrong':>6} {'aborts':>6}"
    )
    for name, config in configs():
        report = evaluate(config)
        red, look = report.by_model[REDUNDANT], report.by_model[LOOKALIKE]
        caught = f"{red.caught}/{red.identical_repeats}"
        print(
            f"{name:<30} {caught:>22} {look.blocked:>19} {report.total.wrong:>6} "
            f"{report.total.aborts:>6}"
        )
    print()
    print("redundant reads caught: identical repeats of the redundant runs blocked or cut")
    print("look-alikes blocked: calls of the look-alike runs blocked (each one wrong to block)")
    print("wrong: blocked calls whose recorded result was new")
    print()
    print_toolkit_rows(mini_swe)


if __name__ == "__main__":
    main()
