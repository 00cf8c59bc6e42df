"""Does a calibrated configuration generalise? Calibrate on some runs, check it on unseen ones.

Run: python benchmarks/calibrate_split.py [DATA_DIR]
Data: ../shared/data (tau-tune.jsonl with tau-tools.json: 533 real tau-bench and tau2-bench
runs; mini-swe-tune.jsonl: 239 real mini-swe-agent runs) and the loop-free sample
tests/fixtures/calibration/mini-swe-loop-free.jsonl (21 of those runs). Each check calibrates
(`calibrate`, the same search as `replay-guard eval --calibrate`, its own held-out check
included) on one set and evaluates the result on another, next to the defaults with the same
policy: loops stopped, calls saved, wrong blocks, runs without a loop stopped. A check holds
when the calibrated configuration stops no more runs without a loop, no fewer loops and blocks
nothing more wrongly than the defaults there. The exit status is 1 when one does not hold.

- tau-bench -> tau2-bench, and tau2-bench -> tau-bench (`source` of tau-tune);
- mini-swe-tune: one half -> the other half, both ways (halves by a hash of the run id);
- the 21 loop-free runs -> the rest of mini-swe-tune.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from langgraph_replay_guard import GuardConfig
from langgraph_replay_guard.calibration import calibrate, score
from langgraph_replay_guard.evaluation import find_loops

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "data"
LOOP_FREE = ROOT / "tests" / "fixtures" / "calibration" / "mini-swe-loop-free.jsonl"

Runs = list[dict[str, Any]]


def _load(path: Path) -> Runs:
    if not path.exists():
        sys.exit(f"{path} not found: the shared data set is needed (../shared/data)")
    return [json.loads(line) for line in path.open(encoding="utf-8") if line.strip()]


def _half(run: dict[str, Any]) -> int:
    return hashlib.sha256(str(run["id"]).encode()).digest()[0] % 2


def check(name: str, chosen: Runs, held: Runs, base: GuardConfig) -> bool:
    """Calibrate on `chosen`, print the defaults and the result on `held`; whether it holds."""
    started = time.perf_counter()
    result = calibrate(chosen, base)
    loops = find_loops(held, base)
    defaults, _ = score(held, loops, base)
    calibrated, _ = score(held, loops, result.config)
    holds = (
        calibrated.healthy_stopped <= defaults.healthy_stopped
        and calibrated.loops_stopped >= defaults.loops_stopped
        and calibrated.wrong <= defaults.wrong
    )
    own = result.held_out
    print(f"{name}: calibrated on {len(chosen)} runs ({sum(map(bool, find_loops(chosen, base)))}"
          f" with a loop), checked on {len(held)} ({defaults.loops} with a loop)")  # fmt: skip
    changes = ", ".join(f"{s} {a}->{b}" for s, a, b in result.changes) or "none"
    dropped = ", ".join(f"{c.setting} {c.start}->{c.value}" for c in result.checks if not c.kept)
    print(f"  changes kept: {changes}; dropped by its own held-out check: {dropped or 'none'}")
    if result.no_loops:
        print("  no run with a loop to calibrate on: every loop threshold kept (exit status 1)")
    if own is not None and own.runs:
        mine, base_own = own.calibrated, own.base
        print(f"  its own held-out part ({own.runs} runs): loops stopped "
              f"{base_own.loops_stopped}/{base_own.loops} -> {mine.loops_stopped}, "
              f"no-loop stopped {base_own.healthy_stopped} -> {mine.healthy_stopped}")  # fmt: skip
    print(f"  {'on the unseen set':<18} {'loops stopped':>13} {'calls saved':>11} "
          f"{'wrong':>5} {'no-loop stopped':>15}")  # fmt: skip
    for label, got in (("defaults", defaults), ("calibrated", calibrated)):
        print(f"  {label:<18} {f'{got.loops_stopped}/{got.loops}':>13} {got.saved:>11} "
              f"{got.wrong:>5} {got.healthy_stopped:>15}")  # fmt: skip
    print(f"  {'holds' if holds else 'DOES NOT HOLD'} ({time.perf_counter() - started:.0f} s)")
    print()
    return holds


def main() -> None:
    tau = _load(SHARED / "tau-tune.jsonl")
    tau_base = GuardConfig().with_policies(SHARED / "tau-tools.json")
    swe = _load(SHARED / "mini-swe-tune.jsonl")
    swe_base = GuardConfig(toolkits=("mini-swe-agent",))
    loop_free = _load(LOOP_FREE)
    bench = [run for run in tau if run["source"] == "tau-bench"]
    bench2 = [run for run in tau if run["source"] == "tau2-bench"]
    first = [run for run in swe if _half(run) == 0]
    second = [run for run in swe if _half(run) == 1]
    free_ids = {run["id"] for run in loop_free}
    rest = [run for run in swe if run["id"] not in free_ids]
    results = [
        check("tau-bench -> tau2-bench", bench, bench2, tau_base),
        check("tau2-bench -> tau-bench", bench2, bench, tau_base),
        check("mini-swe-tune half A -> half B", first, second, swe_base),
        check("mini-swe-tune half B -> half A", second, first, swe_base),
        check("21 loop-free runs -> the rest of mini-swe-tune", loop_free, rest, swe_base),
    ]
    print(f"{sum(results)} of {len(results)} checks hold")
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
