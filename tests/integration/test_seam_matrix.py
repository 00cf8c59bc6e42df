"""The composition crash matrix: every composition x every crash point, run by `crashtest`.

Each composition (`tests/integration/compositions.py`) is crash-tested with the package's own
machinery (`crashtest`: one server per job that forks a process per phase, real SIGKILLs,
fresh SQLite databases per trial): the input runs once to learn the tool calls, then every
call is killed at every crash point and resumed in a new process. A cell is one
composition and one crash point; it passes when every trial there is verified (the crashed
and resumed runs kept to the learning run's path) and
- every unsafe body ran at most once per call, counted per call and per tool and arguments
  (a rerun under a new tool call id is seen);
- every idempotent rerun carried the same idempotency key;
- every unknown outcome (an unsafe call killed after its claim) surfaced as an error or an
  interrupt instead of a rerun.
A composition's clean run without the guard must make the same tool calls and give the same
final answer as its guarded clean run. Samples run a few compositions with `ainvoke` (the
async hooks), with two crashes per trial (the first resume dies at the same point), and a
few cells on `PostgresSaver` and `PostgresStore`.

The cells that fail today because of a seam fixed on another branch are marked in `SEAMS`,
the one table the lead flips after merging.
"""

from __future__ import annotations

import fcntl
import os
import pickle
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from langgraph_replay_guard.crashtest import POINTS, CrashReport, CrashTestError, crashtest
from tests.integration.compositions import COMPOSITIONS

ALL = None
"""In `SEAMS`: every crash point of the composition (and its unguarded comparison)."""

SEAMS: dict[tuple[str, str | None], str] = {}
"""The cells that fail, by (composition, crash point or ALL), with why (each row an
`xfail(strict=True)`, so a cell that starts passing fails until its row goes).

`learning` names the check of the clean (learning) run itself. Empty: every cell holds
(issue 32's seams are fixed); a new seam gets a row here until it is fixed."""

POSTGRES_SAMPLE = [("guard_first", "after_tool"), ("send_fan_out", "after_claim")]
"""The cells the PostgreSQL sample runs (SQLite runs them all)."""

ASYNC_SAMPLE = ["guard_last", "interrupt_tool", "own_run_raises"]
"""Compositions also run with `ainvoke` (the async hooks), at every crash point."""

TWICE_SAMPLE = ["guard_first", "interrupt_tool"]
"""Compositions also run with two crashes per trial (the first resume dies at the point too)."""

_timings: dict[str, float] = {}
_memo: dict[str, CrashReport | CrashTestError] = {}


def _run(
    name: str, postgres: str | None = None, mode: str = "sync"
) -> tuple[CrashReport | CrashTestError, float]:
    """The composition's crash test and the seconds it took.

    `mode`: `sync` (`invoke`, one crash per trial), `async` (`ainvoke`) or `twice` (two
    crashes at the trial's point before the last resume).
    """
    composition = COMPOSITIONS[name]
    points = None if postgres is None else [p for n, p in POSTGRES_SAMPLE if n == name]
    started = time.monotonic()
    try:
        report: CrashReport | CrashTestError = crashtest(
            composition.build,
            answer=composition.answer,
            allow_rerun=composition.allow_rerun,
            compare_unguarded=postgres is None and mode == "sync",
            points=points,
            postgres=postgres,
            asynchronous=mode == "async",
            crashes=2 if mode == "twice" else 1,
            jobs=2,
            timeout=60,
        )
    except CrashTestError as exc:
        report = exc
    return report, time.monotonic() - started


@pytest.fixture(scope="session")
def _shared_reports(
    tmp_path_factory: pytest.TempPathFactory, worker_id: str, testrun_uid: str
) -> Path:
    """A directory every xdist worker of this run shares (under the run's base temporary one).

    Each composition's crash test runs once per run, not once per worker that draws one of its
    cells: the first worker to need it runs it under a file lock and leaves the report there,
    the others read it (the cells of one composition also go to one worker, `xdist_group`).
    Named by the run's id, so a reused `--basetemp` never hands over an earlier run's report.
    """
    base = tmp_path_factory.getbasetemp()
    root = base.parent if worker_id != "master" else base
    directory = root / f"seam-matrix-reports-{testrun_uid}"
    directory.mkdir(exist_ok=True)
    return directory


@cache
def _postgres_report(name: str, postgres: str) -> CrashReport | CrashTestError:
    """The PostgreSQL sample's crash test (per worker: each worker has its own server)."""
    report, seconds = _run(name, postgres)
    _timings[f"{name} (postgres)"] = seconds
    return report


@pytest.fixture
def report(_shared_reports: Path) -> Callable[..., CrashReport | CrashTestError]:
    """`report(name, mode="sync")`: the composition's crash test, run once per test run."""

    def get(name: str, mode: str = "sync") -> CrashReport | CrashTestError:
        label = name + ("" if mode == "sync" else f" ({mode})")
        if label in _memo:
            return _memo[label]
        path = _shared_reports / f"{name}-{mode}.pickle"
        with (_shared_reports / f"{name}-{mode}.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if path.exists():
                found, seconds = pickle.loads(path.read_bytes())
            else:
                found, seconds = _run(name, mode=mode)
                partial = path.with_suffix(f".{os.getpid()}")
                partial.write_bytes(pickle.dumps((found, seconds)))
                partial.replace(path)
        _memo[label] = found
        _timings[label] = seconds
        return found

    return get


def _seam(name: str, point: str | None, mode: str = "sync") -> list[Any]:
    reason = SEAMS.get((name, point)) or SEAMS.get((name, ALL))
    # One composition's cells (in one mode) on one xdist worker: its crash test runs there once.
    group = pytest.mark.xdist_group(f"seam-matrix-{name}-{mode}")
    return [group, pytest.mark.xfail(strict=True, reason=reason)] if reason else [group]


CELLS = [
    pytest.param(name, point, id=f"{name}-{point}", marks=_seam(name, point))
    for name in COMPOSITIONS
    for point in POINTS
]


ASYNC_CELLS = [
    pytest.param(name, point, id=f"{name}-{point}", marks=_seam(name, point, "async"))
    for name in ASYNC_SAMPLE
    for point in POINTS
]
TWICE_CELLS = [
    pytest.param(name, point, id=f"{name}-{point}", marks=_seam(name, point, "twice"))
    for name in TWICE_SAMPLE
    for point in POINTS
]


def _check(report: CrashReport | CrashTestError, point: str) -> None:
    if isinstance(report, CrashTestError):
        raise report
    trials = [t for t in report.trials if t.point == point]
    assert trials, f"no trial at {point}"
    problems = [f"{t.call.label}: {t.problem}" for t in trials if t.problem is not None]
    assert not problems, "\n".join(problems) + "\n\n" + report.render()


@pytest.mark.parametrize(("name", "point"), CELLS)
def test_cell(name: str, point: str, report: Callable[..., Any]) -> None:
    _check(report(name), point)


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=_seam(name, "learning")) for name in COMPOSITIONS],
)
def test_the_clean_run_ran_each_unsafe_body_once(name: str, report: Callable[..., Any]) -> None:
    """No crash needed: a middleware inside the guard must not run a body twice either."""
    found = report(name)
    if isinstance(found, CrashTestError):
        raise found
    assert not found.learning, found.learning


@pytest.mark.parametrize(("name", "point"), ASYNC_CELLS)
def test_async_cell(name: str, point: str, report: Callable[..., Any]) -> None:
    _check(report(name, mode="async"), point)


@pytest.mark.parametrize(("name", "point"), TWICE_CELLS)
def test_cell_crashed_twice(name: str, point: str, report: Callable[..., Any]) -> None:
    _check(report(name, mode="twice"), point)


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=_seam(name, None)) for name in COMPOSITIONS],
)
def test_without_the_guard_the_clean_run_is_the_same(name: str, report: Callable[..., Any]) -> None:
    found = report(name)
    if isinstance(found, CrashTestError):
        raise found
    assert found.unguarded is None, found.unguarded


def test_every_crash_point_is_reached_somewhere(report: Callable[..., Any]) -> None:
    """The matrix crashes something at every point (a point no composition reaches tests
    nothing): the compositions that run on this branch reach all four."""
    reached = {
        t.point
        for name in COMPOSITIONS
        if not isinstance(found := report(name), CrashTestError)
        for t in found.trials
        if t.killed
    }
    assert reached == set(POINTS)


@pytest.mark.parametrize(("name", "point"), POSTGRES_SAMPLE)
def test_postgres_sample(name: str, point: str, postgres_uri: str) -> None:
    _check(_postgres_report(name, postgres_uri), point)


def test_matrix_size_and_time(
    capsys: pytest.CaptureFixture[str], report: Callable[..., Any]
) -> None:
    """Prints the matrix's size and time (the cells above ran first; this only reports)."""
    for name in COMPOSITIONS:
        report(name)
    trials = sum(
        len(r.trials) for n in COMPOSITIONS if not isinstance(r := report(n), CrashTestError)
    )
    total = sum(_timings.values())
    samples = len(ASYNC_CELLS) + len(TWICE_CELLS) + len(POSTGRES_SAMPLE)
    with capsys.disabled():
        print(
            f"\ncrash matrix: {len(COMPOSITIONS)} compositions x {len(POINTS)} crash points = "
            f"{len(CELLS)} cells (+{samples} async, crashed-twice and PostgreSQL cells), "
            f"{trials} trials on SQLite (two processes each), "
            f"{len(SEAMS)} rows of open seams and limits; {total:.0f} s"
        )
        for name, seconds in sorted(_timings.items()):
            print(f"  {name}: {seconds:.1f} s")
    # The budget is 4 minutes on an idle 2-core machine (about 2.5 measured); a shared CI
    # box may be slower, so only a runaway (a composition waiting out its timeouts) fails.
    assert total < 600, f"the matrix took {total:.0f} s: far over its 4-minute budget"


def test_a_retry_middleware_never_reruns_an_unknown_outcome(tmp_path: Any) -> None:
    """ToolRetryMiddleware inside the guard, a send that raised after it went out.

    Unguarded, the retry sends a second email; guarded, the retry's attempt finds the first
    one's outcome unknown and stops the run (`ReplayUnsafeError`, a signal the retry
    middleware passes on), after one email.
    """
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    from langgraph_replay_guard import ReplayUnsafeError
    from tests.integration import compositions

    def sends(guarded: bool) -> tuple[int, BaseException | None]:
        compositions._ATTEMPTS["send"] = 0
        runs: list[int] = []
        body = compositions.send_then_time_out_once.func
        assert body is not None

        def counting(to: str) -> str:
            runs.append(1)
            return body(to)

        name = "guarded" if guarded else "plain"
        with (
            SqliteSaver.from_conn_string(str(tmp_path / f"{name}.ckpt")) as saver,
            SqliteStore.from_conn_string(str(tmp_path / f"{name}.store")) as store,
        ):
            store.setup()
            original = compositions.send_then_time_out_once.func
            compositions.send_then_time_out_once.func = counting
            try:
                agent = compositions.retry_after_effect(
                    checkpointer=saver, store=store, guarded=guarded
                )
                agent.invoke(
                    {"messages": [HumanMessage("send it")]},
                    {"configurable": {"thread_id": name}},
                    durability="sync",
                )
            except ReplayUnsafeError as exc:
                return len(runs), exc
            finally:
                compositions.send_then_time_out_once.func = original
        return len(runs), None

    plain_sends, plain_error = sends(guarded=False)
    assert (plain_sends, plain_error) == (2, None)  # the retry sent a second email
    guarded_sends, guarded_error = sends(guarded=True)
    assert guarded_sends == 1
    assert guarded_error is not None
    assert "outcome is unknown" in str(guarded_error)
