"""How many examples a property test draws: the full count in CI, a quarter in `make test`.

`.ci/run` sets `CI=true`, so CI draws every property test's full count (the number written at
each `examples(...)`); a local `make test` draws a quarter of it (at least 10), which keeps the
everyday loop short while each property still runs on random input every time.
`REPLAY_GUARD_TEST_FULL=1` draws the full counts locally. tests/conftest.py loads the matching
profile for the tests that keep Hypothesis's default count (100, or 25 here).
"""

from __future__ import annotations

import os

FULL = os.environ.get("CI", "").lower() == "true" or os.environ.get(
    "REPLAY_GUARD_TEST_FULL", ""
) not in ("", "0")
PROFILE = "ci" if FULL else "dev"


def examples(full: int) -> int:
    """The examples to draw: `full` in CI (or under REPLAY_GUARD_TEST_FULL), else a quarter."""
    return full if FULL else max(10, full // 4)
