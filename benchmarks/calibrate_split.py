"""Does a calibrated configuration generalise? Calibrate on some models, evaluate on the others.

Run: python benchmarks/calibrate_split.py
Data: ../shared/data/tau-tune.jsonl with tau-tools.json (533 real tau-bench and tau2-bench
runs of five models). For each model with at least 10 runs, the configuration is calibrated
on the runs of every other model (`calibrate`, the same search as `replay-guard eval
--calibrate`) and evaluated on the held-out model's runs, next to the defaults with the same
tool policy: loops stopped, calls saved, wrong blocks, runs without a loop stopped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.calibration import calibrate, find_loops, score

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
MIN_RUNS = 10


def main() -> None:
    path = SHARED / "tau-tune.jsonl"
    if not path.exists():
        sys.exit(f"{path} not found: the shared tau-bench set is needed")
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    base = GuardConfig().with_policies(SHARED / "tau-tools.json")
    models = sorted({str(run["model"]) for run in runs})
    print(f"{path.name}: {len(runs)} runs, models {', '.join(models)}")
    header = (
        f"{'held out':<24} {'runs':>5} {'loops':>5} | {'config':<10} {'stopped':>7} "
        f"{'saved':>6} {'wrong':>5} {'no-loop stopped':>15}"
    )
    print(header)
    for held in models:
        test = [run for run in runs if run["model"] == held]
        if len(test) < MIN_RUNS:
            continue
        train = [run for run in runs if run["model"] != held]
        result = calibrate(train, base)
        loops = find_loops(test, base)
        changes = ", ".join(f"{name} {a}->{b}" for name, a, b in result.changes) or "none"
        for label, config in (("defaults", base), ("calibrated", result.config)):
            got, _ = score(test, loops, config)
            name = held[:24] if label == "defaults" else ""
            size = f"{got.runs:>5} {got.loops:>5}" if label == "defaults" else f"{'':>11}"
            print(
                f"{name:<24} {size} | {label:<10} {got.loops_stopped:>7} {got.saved:>6} "
                f"{got.wrong:>5} {got.healthy_stopped:>15}"
            )
        print(f"{'':<24} calibrated on the other models: {changes}")


if __name__ == "__main__":
    main()
