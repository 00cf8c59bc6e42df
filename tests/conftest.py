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

import sys
from pathlib import Path

import pytest

# Modules whose tests start processes or servers (a test each, or a module-scoped one).
SLOW_MODULES = frozenset(
    {
        "tests/integration/test_attack_issue33.py",
        "tests/integration/test_attack_issue36.py",
        "tests/integration/test_batch_claims.py",
        "tests/integration/test_callbacks_never_forget.py",
        "tests/integration/test_coding_agent.py",
        "tests/integration/test_concurrent_claims.py",
        "tests/integration/test_ledger_one_trip.py",
        "tests/integration/test_ledger_wake.py",
        "tests/integration/test_ledger_wake_attack.py",
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
        "tests/unit/test_warm_children.py",
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


# tryfirst: pytest-xdist's worker reads the `xdist_group` marks in its own hook of the same
# name, registered after this conftest and so called before it; without tryfirst it saw no
# mark and every "grouped" module was spread over the workers after all.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the slow group and pin the modules that share a server to one xdist worker."""
    root = config.rootpath
    for item in items:
        module = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        if module in SLOW_MODULES or item.get_closest_marker("postgres") is not None:
            item.add_marker(pytest.mark.slow)
        if module in GROUPED_MODULES:
            item.add_marker(pytest.mark.xdist_group(module))
        elif "mypy_cache_dir" in getattr(item, "fixturenames", ()):
            # The mypy tests on one worker share its cache: only the first reads the stubs.
            item.add_marker(pytest.mark.xdist_group("mypy"))
    if getattr(config.option, "loadgroup", False):  # set in an xdist worker
        _name_the_groups(items)


def _name_the_groups(items: list[pytest.Item]) -> None:
    """Put each item's xdist group in its node id, as pytest-xdist's worker means to.

    pytest-xdist (3.8) groups by a `@group` suffix it writes to `item._nodeid`; pytest 9 reads
    `Node.nodeid` from `_id` instead, so the suffix never reached the scheduler and
    `--dist loadgroup` spread every group over the workers (each starting its own server).
    Where the node id lives in `_id`, the suffix is written there; elsewhere xdist's works.
    """
    if not items or not hasattr(items[0], "_id"):
        return
    from _pytest.nodeid import coerce_node_id  # pytest >= 9: the node id object

    for item in items:
        groups = sorted(
            {
                str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                for mark in item.iter_markers("xdist_group")
            }
        )
        suffix = f"@{'_'.join(groups)}"
        if groups and not item.nodeid.endswith(suffix):
            item._id = coerce_node_id(f"{item.nodeid}{suffix}")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the warm zygotes early when collected modules use them (they import meanwhile)."""
    wanted = session.items and not session.config.option.collectonly
    if wanted and "tests.warm_children" in sys.modules:
        from tests import warm_children

        warm_children.start()


@pytest.fixture(scope="session")
def mypy_cache_dir(worker_id: str) -> Path:
    """A mypy cache kept between runs, one per xdist worker (mypy's cache is not shared safely).

    mypy checks each cached module against its source's hash, so a kept cache gives the same
    errors as a fresh one; it saves re-reading LangChain's and pydantic's stubs every run.
    """
    path = Path(__file__).resolve().parents[1] / ".mypy_cache" / f"pytest-{worker_id}"
    path.mkdir(parents=True, exist_ok=True)
    return path
