"""Crash injection: SIGKILL a real process at every tool boundary; unsafe effects never repeat.

Each trial runs a guarded graph in a child process that kills itself with SIGKILL at one
boundary (before the side effect, after it but before the ledger's outcome row, after the
outcome row but before the checkpoint, after the checkpoint), then resumes the thread in a
fresh process; an unknown outcome is resolved the way an operator would (checking upstream).
Scenarios: a parallel batch (unsafe + idempotent + pure), the same with a RetryPolicy and a
transient failure, and `interrupt()` inside an unsafe tool. Durability "sync" and "async".
"""

from __future__ import annotations

import os

import pytest

from .crash_matrix import SCENARIOS, run_all, table, trials


def _check(done):
    print("\n" + table(done))
    bad = {f"{t.scenario}/{t.durability}/{t.boundary}": t.problems() for t in done if t.problems()}
    assert not bad
    # Every boundary was really reached: the kill happened where the trial says.
    assert all(t.killed for t in done), [t.boundary for t in done if not t.killed]


# One test per scenario (8 trials each, every durability and boundary) rather than one per
# backend: pytest-xdist spreads them over its workers instead of one worker running 24.
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_crash_matrix_sqlite(tmp_path, scenario):
    made = trials("sqlite", lambda name: str(tmp_path / f"{name}.db"), str(tmp_path))
    _check(run_all([t for t in made if t.scenario == scenario]))


@pytest.mark.postgres
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_crash_matrix_postgres(tmp_path, pg_uri, scenario):
    from .crash_matrix import _setup_postgres

    _setup_postgres(pg_uri)
    made = trials("postgres", lambda name: pg_uri, str(tmp_path))
    _check(run_all([t for t in made if t.scenario == scenario]))


def test_effects_file_is_outside_the_graph(tmp_path):
    # Guard against a harness that could not see a double execution: an unguarded rerun of
    # the same child counts two sends.
    made = trials("sqlite", lambda name: str(tmp_path / f"{name}.db"), str(tmp_path))
    trial = next(t for t in made if t.scenario == "batch" and t.boundary == "after_effect")
    with open(trial.effects, "w", encoding="utf-8") as handle:
        handle.write("send_email\tann@example.com\nsend_email\tann@example.com\n")
    from .crash_matrix import _count

    _count(trial)
    assert trial.unsafe_runs == 2
    assert "unsafe side effect ran 2 times" in " ".join(trial.problems())
    assert os.path.exists(trial.effects)
