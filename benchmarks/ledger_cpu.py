"""CPU and round trips a ledger call costs on PostgreSQL, in one process (issue 36).

Run: python benchmarks/ledger_cpu.py [--pg URI] [--calls N] [--repeat R] [--profile KIND]
Times what the load on a shared machine moves least: the CPU the worker process spends a call
(`time.process_time`) and the CPU its server backend spends (`/proc/<pid>/stat`), and counts
the statements a call sends (each a round trip) and the Python function calls it makes (a
count no load moves). Three kinds of call, as `bench_ledger.py`'s
workers make them:

- `distinct first run`: a new call of a thread running ahead (its reads found nothing);
- `contended first run`: a new call of a thread whose last read found a row (a worker racing
  others on the same calls, which replays seven calls in eight);
- `hit`: a call already recorded, replayed (read and rebuild the ToolMessage).

The package is the one of the checkout the script is in (as for `bench_ledger.py`): a copy
in another worktree measures that commit. `--profile KIND` adds a profile (in CPU time) of
that kind of call. Without --pg a throwaway PostgreSQL server is started from the local
binaries.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ["LANGSMITH_TRACING"] = "false"
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import psycopg  # noqa: E402
from bench_ledger import _cpu_seconds, _with_postgres, context, run_once  # noqa: E402
from langgraph.store.postgres import PostgresStore  # noqa: E402

from langgraph_replay_guard.storage import store_cas  # noqa: E402

STATEMENTS = [0]


def _counted(execute: Any) -> Any:
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        STATEMENTS[0] += 1
        return execute(self, *args, **kwargs)

    return run


def _count_statements() -> None:
    """Count every statement psycopg sends (each a round trip outside pipeline mode)."""
    psycopg.Cursor.execute = _counted(psycopg.Cursor.execute)  # type: ignore[method-assign]
    # Connection.execute makes a cursor and runs its execute: counted there. The guard's
    # statements sent through libpq itself (`store_cas._direct`, where the code has it) too.
    direct = getattr(store_cas, "_direct", None)
    if direct is not None:

        def run(*args: Any, **kwargs: Any) -> Any:
            rows = direct(*args, **kwargs)
            STATEMENTS[0] += rows is not None
            return rows

        store_cas._direct = run


def _kinds(store: Any, tag: str, calls: int) -> dict[str, Any]:
    """One plan per kind of call: each returns a function running call i of that kind."""
    distinct = f"cpu-distinct-{tag}"
    contended = f"cpu-contended-{tag}"

    def distinct_first(i: int) -> None:
        assert run_once(store, context(distinct, i)) == "ran"

    def contended_first(i: int) -> None:
        # A hit just before (untimed) leaves the thread's last read a found row.
        assert run_once(store, context(contended, i)) == "ran"

    def hit(i: int) -> None:
        assert run_once(store, context(distinct, i)) == "replayed"

    def before_contended(i: int) -> None:
        if i:
            assert run_once(store, context(contended, i - 1)) == "replayed"

    return {
        "distinct first run": (distinct_first, None),
        "contended first run": (contended_first, before_contended),
        "hit": (hit, None),
    }


def _python_calls(call: Any, before: Any, calls: int) -> float:
    """Python function calls a call makes (the load does not move this count), over 50 more."""
    profiler = cProfile.Profile()
    for i in range(calls, calls + 50):
        if before is not None:
            before(i)
        profiler.enable()
        call(i)
        profiler.disable()
    stats = pstats.Stats(profiler)
    return float(stats.total_calls) / 50  # type: ignore[attr-defined]


def measure(uri: str, calls: int, repeat: int, profile: str | None) -> None:
    _count_statements()
    with PostgresStore.from_conn_string(uri) as store:
        store.setup()
        run_once(store, context("warm-up", 0))  # connect, prepare
        backend = store.conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
        figures: dict[str, list[tuple[float, float, float]]] = {}
        python_calls: dict[str, float] = {}
        for r in range(repeat):
            for name, (call, before) in _kinds(store, f"{r}-{time.time_ns()}", calls).items():
                client = server = 0.0
                count = 0
                profiler = cProfile.Profile(time.process_time) if profile == name else None
                for i in range(calls):
                    if before is not None:
                        before(i)
                    start = time.process_time(), _cpu_seconds(backend), STATEMENTS[0]
                    if profiler is not None:
                        profiler.enable()
                    call(i)
                    if profiler is not None:
                        profiler.disable()
                    client += time.process_time() - start[0]
                    server += _cpu_seconds(backend) - start[1]
                    count += STATEMENTS[0] - start[2]
                figures.setdefault(name, []).append(
                    (client / calls * 1e6, server / calls * 1e6, count / calls)
                )
                if r == 0:
                    python_calls[name] = _python_calls(call, before, calls)
                if profiler is not None:
                    pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
                    pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
    for name, rows in figures.items():
        client_us = statistics.median(row[0] for row in rows)
        server_us = statistics.median(row[1] for row in rows)
        print(
            f"{name:<20} client CPU {client_us:6.0f} us, server backend CPU {server_us:6.0f} us, "
            f"statements {rows[0][2]:.2f}, Python calls {python_calls[name]:.0f} a call  (runs: "
            + ", ".join(f"{c:.0f}/{s:.0f}" for c, s, _ in rows)
            + ")",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pg", help="PostgreSQL URI (default: a throwaway local server)")
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", help="cProfile one kind of call")
    opts = parser.parse_args()
    _with_postgres(opts.pg, lambda uri: measure(uri, opts.calls, opts.repeat, opts.profile))


if __name__ == "__main__":
    main()
