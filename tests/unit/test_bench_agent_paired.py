"""Issue 34 item 15: `bench_agent.py` reads the overhead ratio from paired steps."""

from __future__ import annotations

import importlib.util
import random
import statistics
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_agent.py"
BASE = "create_agent, no middleware"
GUARD = "create_agent + ReplayGuardMiddleware"
LIMIT = "create_agent + ToolCallLimitMiddleware"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_agent_under_test", BENCH)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _ramp_samples(rounds: int, steps: int, seed: int) -> dict[str, list[float]]:
    """Steps that grow with the thread (4 ms to 13 ms), as `_median_steps` returns them.

    The guard adds 600 us a step and the limit middleware 800 us (true ratio 0.75); each
    step has its own noise (0.3 ms), as on a shared machine.
    """
    rng = random.Random(seed)
    extra = {BASE: 0.0, GUARD: 600e-6, LIMIT: 800e-6}
    samples: dict[str, list[float]] = {label: [] for label in extra}
    for _ in range(rounds):
        for step in range(steps):
            ramp = 4e-3 + 9e-3 * step / steps
            for label, cost in extra.items():
                samples[label].append(ramp + cost + rng.gauss(0, 0.3e-3))
    return samples


def test_paired_steps_read_the_true_ratio_where_the_medians_of_a_ramp_do_not():
    bench = _bench()
    rounds, steps = 5, 199
    paired_errors, median_errors = [], []
    for seed in range(20):
        samples = _ramp_samples(rounds, steps, seed)
        guard, limit, per_round = bench._paired(samples, rounds)
        assert len(per_round) == rounds
        paired_errors.append(abs(guard / limit - 0.75))
        medians = {label: statistics.median(times) for label, times in samples.items()}
        by_medians = (medians[GUARD] - medians[BASE]) / (medians[LIMIT] - medians[BASE])
        median_errors.append(abs(by_medians - 0.75))
        assert abs(guard - 600e-6) < 60e-6
        assert abs(limit - 800e-6) < 60e-6
    # Every paired reading is within 0.1 of the truth; the difference of medians, whose
    # error is set by how spread the ramp's steps are, strays far more often.
    assert max(paired_errors) < 0.1
    assert statistics.median(median_errors) > 3 * statistics.median(paired_errors)


def test_paired_rounds_are_read_from_each_rounds_steps_alone():
    bench = _bench()
    samples = _ramp_samples(2, 50, seed=1)
    # The second round's limit middleware costs twice as much: only that round's ratio halves.
    half = len(samples[LIMIT]) // 2
    samples[LIMIT][half:] = [t + 800e-6 for t in samples[LIMIT][half:]]
    _, _, per_round = bench._paired(samples, 2)
    assert 0.6 < per_round[0] < 0.9
    assert 0.3 < per_round[1] < 0.45
