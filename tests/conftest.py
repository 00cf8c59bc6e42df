"""Suite-wide marks for running in parallel: the `slow` group and the xdist groups.

`make test` runs the whole suite with pytest-xdist (`-n N --dist loadgroup`, N two more than
the cores): each worker has its own temporary directories (`tmp_path` is per worker) and its
own PostgreSQL server (`postgres_uri` is session-scoped, so one per worker, on a free port).
Two things are set here rather than in each module, so the list stays in one place:

- `slow`: the PostgreSQL tests and the modules that start processes or servers (crash tests
  that SIGKILL a child, `langgraph dev`, CLI subprocesses, notebooks' kernels). `make test`
  and CI run them; `pytest -m "not slow"` is the quick loop while editing.
- `xdist_group`: a module whose module-scoped fixture starts a server or builds a database
  runs on one worker, so the fixture is set up once (tests of other modules still spread).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests import gc_tuning, hypothesis_budget, memory_tmp

# Before anything reads `tempfile.gettempdir()`: the run's files on tmpfs (tests/memory_tmp.py).
_MEMORY_TMP = memory_tmp.use()
_PASSED: list[bool] = []

# Fewer collections in every process of the run (tests/gc_tuning.py); frozen after collection.
gc_tuning.tune()

# Property tests: the full example counts in CI (`CI=true`, which .ci/run sets), a quarter in a
# local `make test` (tests/hypothesis_budget.py); this profile covers the tests that keep
# Hypothesis's default count (100 in CI, 25 here).
settings.register_profile("ci", max_examples=100)
settings.register_profile("dev", max_examples=25)
settings.load_profile(hypothesis_budget.PROFILE)

# Modules whose tests start processes or servers (a test each, or a module-scoped one).
SLOW_MODULES = frozenset(
    {
        "tests/integration/test_attack_issue33.py",
        "tests/integration/test_attack_issue36.py",
        "tests/integration/test_attack_issue36_cursor.py",
        "tests/integration/test_attack_issue36_direct.py",
        "tests/integration/test_attack_issue36_ledger.py",
        "tests/integration/test_batch_claims.py",
        "tests/integration/test_callbacks_never_forget.py",
        "tests/integration/test_coding_agent.py",
        "tests/integration/test_concurrent_claims.py",
        "tests/integration/test_ledger_call_cost.py",
        "tests/integration/test_ledger_direct.py",
        "tests/integration/test_ledger_one_statement.py",
        "tests/integration/test_ledger_one_trip.py",
        "tests/integration/test_ledger_wake.py",
        "tests/integration/test_ledger_wake_attack.py",
        "tests/integration/test_crash.py",
        "tests/integration/test_crash_deepagents.py",
        "tests/integration/test_crashtest.py",
        "tests/unit/test_memory_tmp.py",
        "tests/integration/test_demo.py",
        "tests/integration/test_exec_seams.py",
        "tests/integration/test_identity_seams.py",
        "tests/integration/test_live_holder.py",
        "tests/integration/test_no_blocking_on_loop.py",
        "tests/integration/test_pg_template.py",
        "tests/integration/test_seam_matrix.py",
        "tests/integration/test_served_guard.py",
        "tests/integration/test_stack_mcp.py",
        "tests/integration/test_studio.py",
        "tests/unit/test_attack_issue37_differential.py",
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
# Modules whose tests share an import no other test in a worker makes, on one worker: every
# worker collects them, and only the one that runs them imports it (they import it in the
# tests, not at collection).
IMPORT_GROUPS = {
    "tests/integration/test_mcp_annotations.py": "mcp",
    "tests/integration/test_stack_mcp.py": "mcp",
    "tests/unit/test_notebooks.py": "notebooks",
}


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
        elif module in IMPORT_GROUPS:
            item.add_marker(pytest.mark.xdist_group(IMPORT_GROUPS[module]))
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


@pytest.hookimpl(optionalhook=True)  # pytest without xdist (-p no:xdist) has no such hook
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` handing out the longest work first (tests/schedule.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from tests.schedule import LongestFirst

    return LongestFirst(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """In the xdist controller: start the warm zygotes and the PostgreSQL template once.

    Started before the workers (`pytest_sessionstart` of xdist starts them), which inherit
    their sockets in the environment (`warm_children.start_shared`); they import while the
    workers start and collect. Only with workers: a run in one process starts its own on
    demand, as a worker did.
    """
    workers = (
        config.getoption("numprocesses", None) if config.pluginmanager.has_plugin("xdist") else None
    )
    controller = workers and not hasattr(config, "workerinput")
    if not controller or config.option.collectonly:
        return
    if _paths_may_use(config, "warm_children", "crashtest"):
        from tests import warm_children

        warm_children.start_shared()
        _SHARED_ZYGOTES.append(True)  # their CPU is this process's (REPLAY_GUARD_TEST_CPU)
    # One initdb for the run instead of one per worker (about 1 s of CPU each) and per test
    # that starts a server of its own: each server copies the cluster (tests/pg_template.py).
    # A nested run (a test's own `pytest -n 2`) copies its outer run's template.
    from tests import pg_template

    configured = os.environ.get("REPLAY_GUARD_TEST_POSTGRES_URI")
    if (
        not configured
        and not os.environ.get(pg_template.TEMPLATE_ENV)
        and _paths_may_use(config, "pg_uri", "postgres_uri", "any_store", "_Server")
    ):
        initdb = pg_template.find_binary("initdb")
        if initdb is not None:
            pg_template.start(initdb)


def pytest_unconfigure(config: pytest.Config) -> None:
    """In the controller: remove the run's PostgreSQL template (`pytest_configure`), and the
    run's temporary directory when every test passed (`memory_tmp`)."""
    pg_template = sys.modules.get("tests.pg_template")
    if pg_template is not None and not hasattr(config, "workerinput"):
        pg_template.stop()  # type: ignore[attr-defined]
    memory_tmp.finish(_MEMORY_TMP, passed=bool(_PASSED) and all(_PASSED))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int) -> None:
    """Say where the run's temporary files are when a test failed (tests/memory_tmp.py)."""
    _PASSED.append(exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED))
    if _MEMORY_TMP is not None and not _PASSED[-1]:
        terminalreporter.write_line(
            f"the run's temporary files (a failed test's tmp_path among them) are kept in "
            f"{_MEMORY_TMP}"
        )


def _paths_may_use(config: pytest.Config, *words: str) -> bool:
    """Whether the run's paths may hold a test that uses what `words` name (a guess made
    before collection, which the controller does not do: a directory, or a file naming one of
    them). A unit-test file on its own needs no zygote and no server, as its workers would."""
    for arg in config.args or [str(config.rootpath / "tests")]:
        path = Path(arg.split("::", 1)[0])
        path = path if path.is_absolute() else config.invocation_params.dir / path
        if path.is_dir():
            return True
        with contextlib.suppress(OSError):
            text = path.read_text(encoding="utf-8")
            if any(word in text for word in words):
                return True
    return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the warm zygotes early when collected modules use them (they import meanwhile).

    Only for a session of more than one test: a single test (a nested pytest checking the
    suite's own set-up) has nothing to overlap the imports with, and starts them on demand if
    it forks a child at all.
    """
    # What the imports and the collection made stays alive all run: no collection scans it.
    gc_tuning.freeze()
    wanted = len(session.items) > 1 and not session.config.option.collectonly
    if wanted and "tests.warm_children" in sys.modules:
        from tests import warm_children

        warm_children.start()


@pytest.fixture
def mypy_cache_dir() -> Iterator[Path]:
    """The suite's mypy cache, kept between runs and held by one test at a time.

    mypy checks each cached module against its source's hash, so a kept cache gives the same
    errors as a fresh one; it saves re-reading LangChain's and pydantic's stubs (about 10 s of
    CPU). One cache for the whole suite, not one per xdist worker: the mypy tests share an
    xdist group, which lands on either worker, so a cache per worker was cold in every run
    that drew the other worker. mypy's cache is not safe for two processes at once: a file
    lock makes a second holder (`-n` without `--dist loadgroup`, another run of this
    checkout) wait.
    """
    import fcntl

    path = Path(__file__).resolve().parents[1] / ".mypy_cache" / "pytest"
    path.mkdir(parents=True, exist_ok=True)
    with (path.parent / "pytest.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield path


# ------------------------------------------------- where the suite's time goes, per test file
# `REPLAY_GUARD_TEST_CPU=dir` writes, per worker, each test file's wall time and CPU time (this
# process's plus its reaped children's: a cold `subprocess.run`, and a warm zygote's fork once
# the test waited for it, as the zygote reports its usage) to dir/<worker>-<pid>.json, and the
# worker's whole CPU time (start-up, collection, zygotes and servers included) under
# "(the worker process)"; `python -m tests.cpu_table dir` sums them. Off by default (two clock
# reads per test).
_CPU_DIR = os.environ.get("REPLAY_GUARD_TEST_CPU")
# Only the run it was set for writes there: its first process (the xdist controller, or the
# only one) names itself, and its xdist workers are that process's children; a nested pytest
# a test starts (tests/unit/test_parallel_suite.py, test_warm_children.py) is neither and
# writes nothing, so its tests are not counted twice.
_CPU_OWNER = "REPLAY_GUARD_TEST_CPU_OWNER"
if _CPU_DIR:
    owner = os.environ.setdefault(_CPU_OWNER, str(os.getpid()))
    worker_of_owner = "PYTEST_XDIST_WORKER" in os.environ and owner == str(os.getppid())
    if owner != str(os.getpid()) and not worker_of_owner:
        _CPU_DIR = None
_CPU: dict[str, list[float]] = {}
_SHARED_ZYGOTES: list[bool] = []  # set in the xdist controller that started the run's zygotes
_SCHEDULE: list[tuple[str, float, float, float]] = []  # node id, start, wall, CPU


def _cpu_now() -> tuple[float, float]:
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    warm = sys.modules.get("tests.warm_children")
    forked = warm.children_cpu() if warm is not None else 0.0  # type: ignore[attr-defined]
    return time.perf_counter(), (
        time.process_time() + children.ru_utime + children.ru_stime + forked
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Add the test's wall and CPU time to its file's (only under REPLAY_GUARD_TEST_CPU)."""
    if not _CPU_DIR:
        yield
        return
    wall, cpu = _cpu_now()
    yield
    wall_after, cpu_after = _cpu_now()
    entry = _CPU.setdefault(item.path.as_posix(), [0.0, 0.0, 0])
    entry[0] += wall_after - wall
    entry[1] += cpu_after - cpu
    entry[2] += 1
    # The schedule: when each test ran on this worker (perf_counter is the system's monotonic
    # clock, the same in every worker), so `python -m tests.cpu_table dir` can show what each
    # worker ran when, and what ran last (the run's tail).
    _SCHEDULE.append((item.nodeid, wall, wall_after - wall, cpu_after - cpu))


_STARTED = time.perf_counter()
WHOLE_PROCESS = "(the worker process)"  # the key of a worker's whole CPU and wall time


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Write this worker's per-file times (only under REPLAY_GUARD_TEST_CPU)."""
    # The controller, with no test, writes its whole time too when it started the zygotes.
    if _CPU_DIR and (_CPU or _SHARED_ZYGOTES):
        import resource

        def reaped() -> float:
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            return children.ru_utime + children.ru_stime

        before = reaped()  # in the controller: its xdist workers, reaped already
        warm = sys.modules.get("tests.warm_children")
        if warm is not None:
            warm._close_all()  # type: ignore[attr-defined]  # reaped: their CPU counts below
        # The controller counts only the zygotes it reaps here (the workers write their own).
        whole = time.process_time() + (reaped() - before if not _CPU else reaped())
        _CPU[WHOLE_PROCESS] = [time.perf_counter() - _STARTED, whole, 0]
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        out = Path(_CPU_DIR)
        out.mkdir(parents=True, exist_ok=True)
        # The pid too: a second process that reaches this hook never overwrites a worker's.
        (out / f"{worker}-{os.getpid()}.json").write_text(json.dumps(_CPU))
        if _SCHEDULE:
            (out / f"{worker}-{os.getpid()}.schedule").write_text(json.dumps(_SCHEDULE))
