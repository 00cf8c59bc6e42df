"""Suite-wide marks for running in parallel: the `slow` group and the xdist groups.

`make test` runs the whole suite with pytest-xdist (`-n auto --dist loadgroup`): each worker
has its own temporary directories (`tmp_path` is per worker) and its own PostgreSQL server
(`postgres_uri` is session-scoped, so one per worker, on a free port). Two things are set
here rather than in each module, so the list stays in one place:

- `slow`: the PostgreSQL tests and the modules that start processes or servers (crash tests
  that SIGKILL a child, `langgraph dev`, CLI subprocesses, notebooks' kernels). `make test`
  and CI run them; `pytest -m "not slow"` is the quick loop while editing.
- `xdist_group`: a module whose module-scoped fixture starts a server or builds a database
  runs on one worker, so the fixture is set up once (tests of other modules still spread).
"""

from __future__ import annotations

import pytest

# Modules whose tests start processes or servers (a test each, or a module-scoped one).
SLOW_MODULES = frozenset(
    {
        "tests/integration/test_attack_issue33.py",
        "tests/integration/test_callbacks_never_forget.py",
        "tests/integration/test_coding_agent.py",
        "tests/integration/test_concurrent_claims.py",
        "tests/integration/test_ledger_wake.py",
        "tests/integration/test_crash.py",
        "tests/integration/test_crash_deepagents.py",
        "tests/integration/test_crashtest.py",
        "tests/integration/test_demo.py",
        "tests/integration/test_exec_seams.py",
        "tests/integration/test_identity_seams.py",
        "tests/integration/test_live_holder.py",
        "tests/integration/test_no_blocking_on_loop.py",
        "tests/integration/test_seam_matrix.py",
        "tests/integration/test_served_guard.py",
        "tests/integration/test_stack_mcp.py",
        "tests/integration/test_studio.py",
        "tests/unit/test_notebooks.py",
    }
)

# Modules with a module-scoped fixture worth setting up once: a server or a seeded database.
GROUPED_MODULES = frozenset(
    {
        "tests/integration/test_cli_namespace.py",
        "tests/integration/test_result_codec.py",
        "tests/integration/test_served_guard.py",
        "tests/integration/test_studio.py",
    }
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow group and pin the modules that share a server to one xdist worker."""
    root = config.rootpath
    for item in items:
        module = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        if module in SLOW_MODULES or item.get_closest_marker("postgres") is not None:
            item.add_marker(pytest.mark.slow)
        if module in GROUPED_MODULES:
            item.add_marker(pytest.mark.xdist_group(module))
