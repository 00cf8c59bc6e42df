"""Sum the per-file wall and CPU times that `REPLAY_GUARD_TEST_CPU=dir` wrote (conftest.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(directory: str, top: int = 40) -> None:
    """Print each test file's CPU and wall seconds and its test count, most CPU first."""
    totals: dict[str, list[float]] = {}
    for path in Path(directory).glob("*.json"):
        for name, (wall, cpu, count) in json.loads(path.read_text()).items():
            entry = totals.setdefault(name, [0.0, 0.0, 0])
            entry[0] += wall
            entry[1] += cpu
            entry[2] += count
    root = Path(__file__).resolve().parents[1]
    whole = totals.pop("(the worker process)", None)  # tests/conftest.py's WHOLE_PROCESS
    rows = sorted(totals.items(), key=lambda kv: -kv[1][1])
    print(f"{'CPU s':>7} {'wall s':>7} {'tests':>5}  file")
    for name, (wall, cpu, count) in rows[:top]:
        shown = Path(name).relative_to(root) if Path(name).is_relative_to(root) else name
        print(f"{cpu:7.1f} {wall:7.1f} {int(count):5d}  {shown}")
    cpu_sum = sum(v[1] for v in totals.values())
    wall_sum = sum(v[0] for v in totals.values())
    print(f"{cpu_sum:7.1f} {wall_sum:7.1f} {sum(int(v[2]) for v in totals.values()):5d}  total")
    if whole is not None:
        # Start-up, collection, zygotes' imports, servers' start: the workers' time outside tests.
        print(f"{whole[1]:7.1f} {whole[0]:7.1f}        the workers' processes, whole (CPU, wall)")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
