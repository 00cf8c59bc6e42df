"""Instructions per guarded `create_agent` step, counted by valgrind: the same on any load.

Run: python benchmarks/step_instructions.py [steps] [--cache-sim]   (needs valgrind)
`bench_agent.py`'s CPU times move with the machine (other work, caches, frequency); the
number of instructions a step executes does not. This script runs itself under
`valgrind --tool=callgrind` (instrumented only after the imports), builds each configuration
of `bench_agent.py`'s `create_agent` rows in turn, runs 20 steps, then `steps` more (40 by
default) between two dumps of callgrind's counters, and prints the instructions of one step
(all threads) and each middleware's extra over the unguarded step. `--cache-sim` also
simulates the caches (much slower) and prints the first-level and last-level data misses a
step. With `PYTHONPATH` pointing to another checkout, that code is counted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = ("create_agent, no middleware", "pass-through wrap hooks", "ToolCallLimitMiddleware")
GUARD = "ReplayGuardMiddleware"
WARM_UP = 20


def _child(steps: int) -> None:
    """Run under callgrind: each configuration's measured steps between two dumps."""
    os.environ.setdefault("LANGSMITH_TRACING", "false")
    sys.path.insert(0, str(Path(__file__).parent))
    import warnings

    warnings.simplefilter("ignore")
    from bench_agent import PassThrough, _agent, _steps
    from langchain.agents.middleware import ToolCallLimitMiddleware

    from langgraph_replay_guard import ReplayGuard

    # Instrument from here on (the imports above ran at native speed).
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True)
    time.sleep(1)  # callgrind reads its command file between blocks
    rows = [
        [],
        [PassThrough()],
        [ToolCallLimitMiddleware(thread_limit=1_000_000)],
        [ReplayGuard().middleware()],
    ]
    for middleware in rows:
        run = _steps(_agent(middleware), WARM_UP + steps + 5)
        for _ in range(WARM_UP):
            next(run)
        time.tzset()  # `--dump-before=time_tzset`: a dump ends the build and warm-up
        for _ in range(steps):
            next(run)
        time.tzset()  # this dump holds the measured steps only


def _summary(path: Path) -> dict[str, int]:
    text = path.read_text()
    events = re.search(r"^events: (.+)$", text, re.M)
    summary = re.search(r"^summary: (.+)$", text, re.M)
    if events is None or summary is None:
        msg = f"{path}: not a callgrind dump (no events or summary line)"
        raise ValueError(msg)
    return dict(zip(events.group(1).split(), map(int, summary.group(1).split()), strict=True))


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    steps = int(args[0]) if args else 40
    if "--child" in sys.argv:
        _child(steps)
        return
    cache = "--cache-sim" in sys.argv
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--cache-sim={'yes' if cache else 'no'}",
            "--dump-before=time_tzset",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            str(steps),
            "--child",
        ]
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run(command, check=True, env=env, capture_output=True)
        # Dumps 1, 3, 5, 7 end a build and warm-up; 2, 4, 6, 8 hold the measured steps.
        dumps = [_summary(Path(f"{out}.{n}")) for n in (2, 4, 6, 8)]
    per_step = [{k: v / steps for k, v in d.items()} for d in dumps]
    base = per_step[0]
    labels = [*ROWS, GUARD]
    print(f"{steps} steps after {WARM_UP}, instructions a step (all threads), callgrind")
    for label, counts in zip(labels, per_step, strict=True):
        extra = counts["Ir"] - base["Ir"]
        line = f"  {label:32}{counts['Ir'] / 1e6:>9.3f} M  +{extra / 1e3:>7.0f} k"
        if cache:
            misses = {k: counts[k] - base[k] for k in ("D1mr", "D1mw", "DLmr", "DLmw")}
            line += (
                f"   D1 misses +{(misses['D1mr'] + misses['D1mw']) / 1e3:.1f} k"
                f", LL misses +{(misses['DLmr'] + misses['DLmw']) / 1e3:.2f} k"
            )
        print(line)
    guard = per_step[3]["Ir"] - base["Ir"]
    limit = per_step[2]["Ir"] - base["Ir"]
    hooks = per_step[1]["Ir"] - base["Ir"]
    print(
        f"guard / ToolCallLimitMiddleware, extra instructions: {guard / limit:.2f}x "
        f"(the pass-through hooks: {hooks / limit:.2f}x)"
    )


if __name__ == "__main__":
    main()
