"""The suite's own garbage-collector settings hold in the process running the tests."""

from __future__ import annotations

import gc

from tests import gc_tuning


def test_the_running_process_collects_at_the_suites_thresholds_with_its_imports_frozen() -> None:
    assert gc.get_threshold() == gc_tuning.THRESHOLDS
    # Collection froze what the imports made: LangGraph and LangChain alone are far more
    # than ten thousand objects.
    assert gc.get_freeze_count() > 10_000
