"""What the same-failure layer stops, and what it leaves alone, per data set and threshold.

Run: python benchmarks/eval_same_failure.py [THRESHOLD ...]   (default: 3 4 5 6)

For each set and `max_same_failures` value, every run is evaluated with the layer off
(`max_same_failures=0`) and on; a run the layer changes is listed with what it blocked and
whether the blocked call's recorded result was the same failure again (`redundant`) or new
(`wrong`). Sets: ../shared/data/tau-tune.jsonl (when present, with tau-tools.json),
benchmarks/data/coding-synthetic.jsonl and benchmarks/data/coding-same-failure.jsonl (both
SYNTHETIC; with coding-presets.json and the `failure_pattern` of coding-failures.json).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.evaluation import EvalReport, evaluate_trajectories

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CODING_NORMALIZE = [r"in [0-9.]+s"]


def sets() -> Iterator[tuple[str, Path, GuardConfig, list[str]]]:
    """(name, trajectories, base configuration, normalize) of each data set present."""
    if (SHARED / "tau-tune.jsonl").exists():
        tau = GuardConfig().with_policies(SHARED / "tau-tools.json")
        yield "tau-tune (real)", SHARED / "tau-tune.jsonl", tau, []
    coding = GuardConfig.model_validate(
        json.loads((DATA / "coding-failures.json").read_text())
    ).with_policies(DATA / "coding-presets.json")
    yield "coding-synthetic", DATA / "coding-synthetic.jsonl", coding, CODING_NORMALIZE
    yield "coding-same-failure", DATA / "coding-same-failure.jsonl", coding, CODING_NORMALIZE


def run_report(run: dict[str, Any], config: GuardConfig, normalize: list[str]) -> EvalReport:
    return evaluate_trajectories([run], config, normalize=normalize)


def main(thresholds: list[int]) -> None:
    for name, path, base, normalize in sets():
        runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        off = base.model_copy(update={"max_same_failures": 0})
        before = [run_report(run, off, normalize).total for run in runs]
        calls = sum(t.calls for t in before)
        print(f"{name}: {len(runs)} runs, {calls} calls")
        for limit in thresholds:
            on = base.model_copy(update={"max_same_failures": limit})
            stopped = saved = 0
            changed = []
            for run, old in zip(runs, before, strict=True):
                new = run_report(run, on, normalize).total
                if new.by_reason.get("same_failure", 0) == 0:
                    continue
                extra = (new.blocked + new.cut) - (old.blocked + old.cut)
                stopped += new.aborts - old.aborts
                saved += extra
                changed.append((run["id"], new.redundant - old.redundant, new.wrong - old.wrong))
            print(
                f"  max_same_failures={limit}: runs changed {len(changed)}, loops stopped "
                f"{stopped}, calls saved {saved}"
            )
            for ident, redundant, wrong in changed:
                print(f"    {ident[:90]}: same-failure blocks redundant {redundant} wrong {wrong}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [3, 4, 5, 6])
