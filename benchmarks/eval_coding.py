"""What `bash` as `pure`, as `unsafe` and with the `shell` preset block on coding-agent runs.

Run: python benchmarks/eval_coding.py
Data: benchmarks/data/coding-synthetic.jsonl (SYNTHETIC trajectories; see
benchmarks/data/make_coding_synthetic.py) and the policy files next to it. Each policy gives
the editor tools the `editor` preset and changes only how `bash` is classified. The same
numbers come from `replay-guard eval DATA --policy POLICY --normalize 'in [0-9.]+s'`
(the normalization removes test-run durations, which differ on every run).
"""

from __future__ import annotations

import json
from pathlib import Path

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.evaluation import evaluate_file

DATA = Path(__file__).parent / "data"
TRAJECTORIES = DATA / "coding-synthetic.jsonl"
NORMALIZE = [r"in [0-9.]+s"]
CD_IS_LOCAL = {"arg": "command", "prefixes": ["cd"], "replay": "pure"}


def configs() -> list[tuple[str, GuardConfig]]:
    presets = json.loads((DATA / "coding-presets.json").read_text())
    presets["tools"]["bash"]["classify"] = [CD_IS_LOCAL]
    return [
        ("no policy (every tool pure)", GuardConfig()),
        ("bash pure", GuardConfig().with_policies(DATA / "coding-bash-pure.json")),
        ("bash unsafe", GuardConfig().with_policies(DATA / "coding-bash-unsafe.json")),
        ("bash shell preset", GuardConfig().with_policies(DATA / "coding-presets.json")),
        ("shell preset, cd local to the call", GuardConfig.model_validate(presets)),
    ]


def main() -> None:
    print(f"{TRAJECTORIES.name} (synthetic), normalize {NORMALIZE}")
    header = (
        f"{'policy':<36} {'blocked':>7} {'wrong':>6} {'strong: redundant':>17} "
        f"{'repeats caught':>15} {'aborts':>6} {'cut':>5}"
    )
    print(header)
    for name, config in configs():
        report = evaluate_file(TRAJECTORIES, config, normalize=NORMALIZE)
        total = report.total
        strong = report.by_model["synthetic-strong"]
        caught = f"{total.caught}/{total.identical_repeats}"
        print(
            f"{name:<36} {total.blocked:>7} {total.wrong:>6} {strong.redundant:>17} "
            f"{caught:>15} {total.aborts:>6} {total.cut:>5}"
        )
    print()
    print("wrong: blocked calls whose recorded result was new (a legitimate call blocked)")
    print("strong: redundant: the strong agent's repeats answered from the earlier result")
    print("repeats caught: identical repeats blocked or made unnecessary by an abort")


if __name__ == "__main__":
    main()
