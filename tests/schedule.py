"""xdist's `--dist loadgroup`, with the longest work handed out first (tests/durations.json).

pytest-xdist hands out work units (an `xdist_group`'s tests, or one test) in a fixed order: the
groups by their number of tests, then every other test in collection order. A worker asks for
more as it runs low, so the run ends when the last unit handed out ends: the order decided
the tail. Collected in file order, the suite ended with the nested `pytest -n 2` runs of
`tests/unit/test_warm_children.py` and `test_parallel_suite.py` (10 to 30 s each) while the
other worker had nothing left to take, and the tests that mostly wait (the notebooks'
kernels, the site build, `langgraph dev`) came wherever their file sorted.

`LongestFirst` hands the units out longest first (a unit's length: the sum of its tests'
expected seconds from `tests/durations.json`, written by `python -m tests.cpu_table DIR
--durations` from a run under `REPLAY_GUARD_TEST_CPU=DIR`). What a unit holds is unchanged:
a group still runs on one worker, and each worker still takes the next unit as it runs low.
A test the table does not name counts as its file's typical test (the table's `files`), or
`DEFAULT_SECONDS`; ties keep xdist's order. The table only orders: a stale one costs time,
never a test.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadGroupScheduling

TABLE = Path(__file__).with_name("durations.json")
DEFAULT_SECONDS = 0.05
"""A test of a file the table does not know (most of the suite's tests take less)."""


def base_id(nodeid: str) -> str:
    """The node id without the `@group` suffix conftest.py adds (as xdist splits it)."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid


def expected_seconds(table: Mapping[str, Any], nodeid: str) -> float:
    """How long the test is expected to take: its own entry, else its file's typical test."""
    test = base_id(nodeid)
    seconds = table.get("tests", {}).get(test)
    if seconds is None:
        seconds = table.get("files", {}).get(test.split("::", 1)[0], DEFAULT_SECONDS)
    return float(seconds)


def load_table(path: Path = TABLE) -> dict[str, Any]:
    """The checked-in table, or an empty one (xdist's own order) when it is missing."""
    try:
        table: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return table


def longest_first(
    units: Mapping[str, Mapping[str, bool]], table: Mapping[str, Any]
) -> list[tuple[str, Any]]:
    """xdist's work units (scope: {node id: done}), longest first; ties keep their order."""
    return sorted(units.items(), key=lambda unit: -sum(expected_seconds(table, n) for n in unit[1]))


class LongestFirst(LoadGroupScheduling):
    """`--dist loadgroup` that hands out the longest units first."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self._table = load_table()
        self._ordered = False

    def _assign_work_unit(self, node: Any) -> None:
        # The work queue is complete at the first assignment (`schedule` builds it, then
        # assigns): order it once, there.
        if not self._ordered:
            self._ordered = True
            units = longest_first(self.workqueue, self._table)
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)
