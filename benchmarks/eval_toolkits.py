"""What the coding toolkits change on coding-agent runs, against the usual policies.

Run: python benchmarks/eval_toolkits.py
First table: the `swe-agent` toolkit against three usual policies on SWE-agent-style runs.
Second: the agent's toolkit alone on each recorded set the project has (all SYNTHETIC, all
in SWE-agent's tool names; no set here uses mini-swe-agent's or OpenHands' names):
dedup blocks and the wrong ones, the redundant-read catch rate, loop stops and the wrong
ones, the loop runs stopped, and the runs stopped that have no loop. Which runs loop is
written in their ids by the generators (`LOOP_RUNS`).
Data: benchmarks/data/swe-synthetic.jsonl (SYNTHETIC trajectories; see
benchmarks/data/make_swe_synthetic.py). Its `synthetic-swe-redundant` runs ask again for what
they already have (every identical repeat there is a redundant read); its
`synthetic-swe-lookalike` runs only look like repeats (any block there is wrong). The same
numbers come from `replay-guard eval DATA --toolkit swe-agent --normalize 'in [0-9.]+s'`.
"""

from __future__ import annotations

import json
from pathlib import Path

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.evaluation import EvalReport, evaluate_file

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


TOOLKITS = ("swe-agent",)
# The runs the generators (benchmarks/data/make_*.py) made as loops: a weak agent repeating
# a failing call, paging forever, opening a missing file again and again.
LOOP_RUNS = ("loop-", "weak-", "swe-scroll-loop-", "swe-open-missing-")
SETS = ("swe-synthetic.jsonl", "coding-synthetic.jsonl", "coding-same-failure.jsonl")


def toolkit_rows() -> list[tuple[str, str, EvalReport]]:
    """The agent's toolkit, alone, on each recorded set."""
    return [
        (toolkit, name, evaluate(GuardConfig(toolkits=[toolkit]), DATA / name))
        for name in SETS
        for toolkit in TOOLKITS
    ]


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def print_toolkit_rows() -> None:
    """The second table (see the module docstring)."""
    print(
        f"{'set':<26} {'toolkit':<15} {'dedup':>5} {'wrong':>5} {'reads caught':>12} "
        f"{'stops':>5} {'wrong':>5} {'loops stopped':>13} {'stopped, no loop':>16}"
    )
    for toolkit, name, report in toolkit_rows():
        total = report.total
        ids = [json.loads(line)["id"] for line in (DATA / name).read_text().splitlines()]
        loops = {i for i in ids if i.startswith(LOOP_RUNS)}
        stopped = {a.trajectory for a in report.aborts}
        print(
            f"{name:<26} {toolkit:<15} {total.dedup.blocked:>5} {total.dedup.wrong:>5} "
            f"{_rate(total.kind_rate('redundant_read')):>12} {total.stops.blocked:>5} "
            f"{total.stops.wrong:>5} {f'{len(stopped & loops)}/{len(loops)}':>13} "
            f"{len(stopped - loops):>16}"
        )


def main() -> None:
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
    print_toolkit_rows()


if __name__ == "__main__":
    main()
