"""Sum the per-file wall and CPU times that `REPLAY_GUARD_TEST_CPU=dir` wrote (conftest.py).

`python -m tests.cpu_table DIR [TOP]`: each file's CPU and wall seconds, most CPU first.
`python -m tests.cpu_table DIR --schedule`: what each xdist worker ran when (its longest
tests, when it ran its last one, how long it had nothing to run), to find the run's tail.
`python -m tests.cpu_table DIR --durations`: the table `tests/schedule.py` orders the work by
(`tests/durations.json`), from this run's wall times.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

LISTED = 1.0
"""--durations: a test this long or longer gets its own entry; shorter ones their file's mean."""


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
        # Start-up, collection, zygotes' imports, servers' start: the workers' time outside tests
        # (and the xdist controller's, with the zygotes it started for all workers).
        print(f"{whole[1]:7.1f} {whole[0]:7.1f}        the run's processes, whole (CPU, wall)")


def _schedules(directory: str) -> dict[str, list[tuple[str, float, float, float]]]:
    """Each worker's tests: (node id, start, wall, CPU), in the order it ran them."""
    found: dict[str, list[tuple[str, float, float, float]]] = {}
    for path in sorted(Path(directory).glob("*.schedule")):
        worker = path.stem.rsplit("-", 1)[0]
        found[worker] = sorted((tuple(row) for row in json.loads(path.read_text())), key=_start)
    return found


def _start(row: Any) -> float:
    return float(row[1])


def schedule(directory: str, longest: int = 8, last: int = 5) -> None:
    """Print per worker: first start and last end (seconds from the run's first test), how long
    it sat between tests, its longest tests and its last ones."""
    workers = _schedules(directory)
    if not workers:
        print("no schedule files (run with REPLAY_GUARD_TEST_CPU=DIR)")
        return
    zero = min(rows[0][1] for rows in workers.values() if rows)
    ends = {w: rows[-1][1] + rows[-1][2] - zero for w, rows in workers.items() if rows}
    for worker, rows in workers.items():
        busy = sum(row[2] for row in rows)
        cpu = sum(row[3] for row in rows)
        print(
            f"{worker}: {len(rows)} tests, {rows[0][1] - zero:.1f} s to {ends[worker]:.1f} s, "
            f"in tests {busy:.1f} s (CPU {cpu:.1f} s), between tests "
            f"{ends[worker] - (rows[0][1] - zero) - busy:.1f} s"
        )
        print("  longest (start, wall, CPU):")
        for node, start, wall, cpu in sorted(rows, key=lambda r: -r[2])[:longest]:
            print(f"    {start - zero:7.1f} {wall:6.1f} {cpu:6.1f}  {node[:110]}")
        print("  last:")
        for node, start, wall, cpu in rows[-last:]:
            print(f"    {start - zero:7.1f} {wall:6.1f} {cpu:6.1f}  {node[:110]}")
    print(
        f"the run: last test ended at {max(ends.values()):.1f} s; the first worker to run out "
        f"of work did at {min(ends.values()):.1f} s (the tail: "
        f"{max(ends.values()) - min(ends.values()):.1f} s)"
    )


def durations(directory: str) -> None:
    """Print tests/durations.json's content: long tests by node id, other tests per file."""
    from tests.schedule import base_id

    tests: dict[str, float] = {}
    short: dict[str, list[float]] = {}
    for rows in _schedules(directory).values():
        for node, _start_at, wall, _cpu in rows:
            node = base_id(node)
            if wall >= LISTED:
                tests[node] = round(wall, 1)
            else:
                short.setdefault(node.split("::", 1)[0], []).append(wall)
    files = {name: round(sum(w) / len(w), 3) for name, w in sorted(short.items())}
    table = {"tests": dict(sorted(tests.items())), "files": files}
    print(json.dumps(table, indent=1))


if __name__ == "__main__":
    if "--schedule" in sys.argv[2:]:
        schedule(sys.argv[1])
    elif "--durations" in sys.argv[2:]:
        durations(sys.argv[1])
    else:
        main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
