"""What the `swe-agent` toolkit changes on SWE-agent-style runs, against the usual policies.

Run: python benchmarks/eval_toolkits.py
Data: benchmarks/data/swe-synthetic.jsonl (SYNTHETIC trajectories; see
benchmarks/data/make_swe_synthetic.py). Its `synthetic-swe-redundant` runs ask again for what
they already have (every identical repeat there is a redundant read); its
`synthetic-swe-lookalike` runs only look like repeats (any block there is wrong). The same
numbers come from `replay-guard eval DATA --toolkit swe-agent --normalize 'in [0-9.]+s'`.
"""

from __future__ import annotations

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


if __name__ == "__main__":
    main()
