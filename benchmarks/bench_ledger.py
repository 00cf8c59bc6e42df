"""Cost of the replay ledger: first run, hit, growth over 10,000 calls, contended claims.

Run: python benchmarks/bench_ledger.py [--pg URI] [--quick] [--batches-only]
Goals (issues 12, 36): the per-call cost at call 10,000 within 1.2x of call 200 (unsafe tool,
SqliteStore); on PostgreSQL 8 processes x 500 identical unsafe calls >= 1,000 calls/s with p99
<= 10 ms, 8 x 500 distinct ones >= 1,500 calls/s, both with 0 double effects and 0 lost rows;
the per-call cost of a first run and a hit on PostgreSQL beside SQLite's; calls/s of batches of
N = 1, 4, 16 parallel unsafe calls, their claims written together (issue 36 item 3) beside one
claim per call, on SQLite and PostgreSQL. Without --pg a
throwaway PostgreSQL server is started from the local binaries.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ["LANGSMITH_TRACING"] = "false"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from langgraph.store.memory import InMemoryStore
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard.integrations.ledger_gate import replayed_message
from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import (
    CallContext,
    CallIdentity,
    Write,
    admit,
    args_digest,
    finished_entry,
    index_namespace,
    row_namespace,
)
from langgraph_replay_guard.storage import batch_claims, wake
from langgraph_replay_guard.storage.ledger_io import run_plan

ARGS = {"to": "ann@example.com", "subject": "Your order", "body": "x" * 200}
PREFIX = ("replay_guard",)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def context(thread: str, i: int, args: dict[str, Any] | None = None) -> CallContext:
    """The context of call `i` of a thread, as the gate builds it from a ToolCallRequest."""
    args = {**ARGS, "n": i} if args is None else args
    return CallContext(
        identity=CallIdentity(thread, "tools", f"ai-{i}", f"call-{i}"),
        tool="send_email",
        replay="unsafe",
        args=args,
        args_hash=args_digest(args),
        rows_ns=row_namespace(PREFIX, thread),
        index_ns=index_namespace(PREFIX, thread),
        wait=30.0,
        is_answered=lambda _tool_call_id, _ai_id: True,
        is_alive=lambda owner: owners.is_alive(owner, _now()),
        new_owner=lambda: owners.REGISTRY.new_owner(900.0, _now()),
        now=_now,
        elapsed=time.monotonic,
    )


def run_once(store: Any, ctx: CallContext, effect: Any = None, group: Any = None) -> str:
    """Admit a call; if this worker claims it, do the effect and record the outcome."""
    admission = run_plan(store, admit(ctx), group=group)
    if admission.kind == "replay":
        assert admission.entry is not None
        replayed_message(admission.entry, {"name": ctx.tool, "id": ctx.identity.tool_call_id})
        return "replayed"
    assert admission.kind == "run"
    assert admission.entry is not None
    if effect is not None:
        effect(ctx.identity.key)
    done = finished_entry(admission.entry, "Email sent to ann@example.com", None, "success")
    run_plan(store, _write(ctx, done))
    owners.REGISTRY.release(admission.entry.owner)
    return "ran"


def _write(ctx: CallContext, entry: Any) -> Any:
    yield Write(((ctx.rows_ns, entry.key, entry.to_value()),))


def _sqlite_store(path: str) -> SqliteStore:
    store = SqliteStore(sqlite3.connect(path, check_same_thread=False, isolation_level=None))
    store.setup()
    return store


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def ledger_costs(store: Any, label: str, n: int) -> None:
    thread = f"costs-{label}"
    first, hit = [], []
    for i in range(n):
        start = time.perf_counter()
        run_once(store, context(thread, i))
        first.append(time.perf_counter() - start)
    for i in range(n):
        start = time.perf_counter()
        assert run_once(store, context(thread, i)) == "replayed"
        hit.append(time.perf_counter() - start)
    print(
        f"{label:<20} first run (claim + outcome) {_median_us(first):8.1f} us   "
        f"hit (read + rebuild) {_median_us(hit):8.1f} us",
        flush=True,
    )


def growth(path: str, total: int, timed: int = 200) -> None:
    """Per-call cost at call `total` of one thread against call ~200 of another, side by side.

    Both threads live in one SqliteStore file; the timed calls alternate between them, so
    the machine's noise (disk syncs, other processes) falls on both sides alike.
    """
    store = _sqlite_store(path)
    for i in range(total):
        run_once(store, context("long-thread", i))
    for i in range(200 - timed // 2):
        run_once(store, context("short-thread", i))
    late, early = [], []
    for j in range(timed):
        for thread, index, samples in (
            ("long-thread", total + j, late),
            ("short-thread", 200 - timed // 2 + j, early),
        ):
            start = time.perf_counter()
            run_once(store, context(thread, index))
            samples.append(time.perf_counter() - start)
    ratio = statistics.median(late) / statistics.median(early)
    print(
        f"growth (SqliteStore, unsafe calls): call ~{total} of a long thread "
        f"{_median_us(late):.0f} us, call ~200 of a short one {_median_us(early):.0f} us; "
        f"ratio {ratio:.2f}x (goal <= 1.2x)"
    )


def _worker(
    uri: str, calls: int, seed: int, effects: str, out: Any, ready: Any, go: Any, distinct: bool
) -> None:
    from langgraph.store.postgres import PostgresStore

    order = list(range(calls))
    random.Random(seed).shuffle(order)
    thread = f"distinct-{seed}" if distinct else "contended"

    def effect(key: str) -> None:
        with open(effects, "a", encoding="utf-8") as file:
            file.write(f"{thread}/{key}\n")

    with PostgresStore.from_conn_string(uri) as store:
        run_once(store, context("warm-up", seed, {"n": -seed}))  # connect, prepare
        wake.listen(store, row_namespace(PREFIX, thread))  # a running worker listens already
        backend = store.conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
        ready.put(seed)
        go.wait()  # the clock starts when every worker is connected (not at spawn)
        latencies, outcomes = [], {"ran": 0, "replayed": 0, "in_flight": 0}
        cpu = time.process_time(), _cpu_seconds(backend)
        begin = time.perf_counter()
        for i in order:
            start = time.perf_counter()
            try:
                outcome = run_once(store, context(thread, i, {"n": i}), effect)
            except Exception as exc:  # ReplayInFlightError: counted, not a failure
                outcome = "in_flight" if type(exc).__name__ == "ReplayInFlightError" else "error"
            latencies.append(time.perf_counter() - start)
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        end = time.perf_counter()
        spent = (time.process_time() - cpu[0], _cpu_seconds(backend) - cpu[1])
    out.put((latencies, outcomes, begin, end, spent))


def _cpu_seconds(pid: int) -> float:
    """CPU seconds a process on this machine used (its server backend's), 0 where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def contended(uri: str, workers: int, calls: int, *, distinct: bool = False) -> None:
    """`workers` processes each try to run the same `calls` unsafe calls, in random orders.

    With `distinct`, each process runs `calls` calls of its own thread (no contention).
    Calls/s counts from the moment every worker is connected to the last one's end.
    """
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(uri) as store:
        store.setup()
    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        effects = os.path.join(tmp, "effects.txt")
        queue: Any = spawn.Queue()
        ready: Any = spawn.Queue()
        go: Any = spawn.Event()
        procs = [
            spawn.Process(
                target=_worker, args=(uri, calls, seed, effects, queue, ready, go, distinct)
            )
            for seed in range(workers)
        ]
        for proc in procs:
            proc.start()
        for _ in procs:
            ready.get()
        go.set()
        results = [queue.get() for _ in procs]
        for proc in procs:
            proc.join()
        lines = Path(effects).read_text().splitlines() if os.path.exists(effects) else []
    wall = max(r[3] for r in results) - min(r[2] for r in results)
    client = sum(r[4][0] for r in results)
    server = sum(r[4][1] for r in results)
    latencies = sorted(x for lat, *_ in results for x in lat)
    totals: dict[str, int] = {}
    for _, outcome, *_ in results:
        for key, value in outcome.items():
            totals[key] = totals.get(key, 0) + value
    doubles = len(lines) - len(set(lines))
    threads = [f"distinct-{seed}" for seed in range(workers)] if distinct else ["contended"]
    with PostgresStore.from_conn_string(uri) as store:
        lost = 0
        for thread in threads:
            for i in range(calls):
                ctx = context(thread, i, {"n": i})
                item = store.get(ctx.rows_ns, ctx.identity.key)
                if item is None or item.value.get("status") != "completed":
                    lost += 1
    calls_made = len(latencies)
    p50 = latencies[len(latencies) // 2] * 1e3
    p99 = latencies[int(len(latencies) * 0.99)] * 1e3
    what = "distinct" if distinct else "identical"
    print(
        f"{'distinct' if distinct else 'contended'} claims (PostgreSQL, {workers} processes x "
        f"{calls} {what} unsafe calls): "
        f"{len(latencies) / wall:.0f} calls/s, latency p50 {p50:.2f} ms p99 {p99:.2f} ms; "
        f"effects {len(set(lines))}/{calls * len(threads)}, double effects {doubles}, "
        f"lost rows {lost}; outcomes {totals}; CPU a call: workers {client / calls_made * 1e3:.2f} "
        f"ms, their server backends {server / calls_made * 1e3:.2f} ms",
        flush=True,
    )


def batches(store: Any, label: str, calls: int, sizes: tuple[int, ...] = (1, 4, 16)) -> None:
    """Calls/s of batches of N parallel unsafe calls, as ToolNode runs them (one thread each).

    Each batch is one AIMessage's N calls, run on a thread pool sized as LangGraph's default
    (`batch_claims.THREADS`); its claims are written together (`batch_claims.join`) or, for
    the side-by-side figure, one transaction per call (as before issue 36 item 3). The two
    ways alternate batch by batch, so the machine's noise falls on both alike.
    """
    from concurrent.futures import ThreadPoolExecutor

    thread = f"batches-{label}-{time.monotonic_ns()}"
    rows_ns = row_namespace(PREFIX, thread)
    figures = []

    def one(ctx: CallContext, ai: str, size: int, joins: bool) -> str:
        group = batch_claims.join(store, (rows_ns, ai), size) if joins else None
        return run_once(store, ctx, group=group)

    with ThreadPoolExecutor(max_workers=batch_claims.THREADS) as pool:
        for size in sizes:
            spent = {False: 0.0, True: 0.0}
            count = max(2, calls // size)
            for b in range(count):
                joins = b % 2 == 1
                ai = f"ai-{size}-{b}"
                ctxs = [
                    replace(
                        context(thread, b, {"size": size, "b": b, "j": j}),
                        identity=CallIdentity(thread, "tools", ai, f"call-{ai}-{j}"),
                    )
                    for j in range(size)
                ]
                start = time.perf_counter()
                ran = list(pool.map(one, ctxs, [ai] * size, [size] * size, [joins] * size))
                spent[joins] += time.perf_counter() - start
                assert set(ran) == {"ran"}
            per_mode = (count // 2) * size
            figures.append(
                f"N={size}: {per_mode / spent[True]:.0f} together, "
                f"{per_mode / spent[False]:.0f} one claim per call"
            )
    print(f"batches ({label}, calls/s): " + "; ".join(figures), flush=True)


def postgres(uri: str, workers: int, calls: int, n: int) -> None:
    """Everything measured on PostgreSQL: per-call costs, contended and distinct claims."""
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(uri) as store:
        store.setup()
        ledger_costs(store, "PostgresStore", n)
        batches(store, "PostgresStore", calls * 2)
    contended(uri, workers, calls)
    contended(uri, workers, calls, distinct=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pg", help="PostgreSQL URI (default: a throwaway local server)")
    parser.add_argument("--quick", action="store_true", help="smaller runs")
    parser.add_argument(
        "--batches-only", action="store_true", help="only the batch figures (SQLite, PostgreSQL)"
    )
    opts = parser.parse_args()
    n = 300 if opts.quick else 2000
    calls = 100 if opts.quick else 500
    if opts.batches_only:
        with tempfile.TemporaryDirectory() as tmp:
            batches(_sqlite_store(os.path.join(tmp, "batches.db")), "SqliteStore", calls * 2)
        _with_postgres(opts.pg, lambda uri: _pg_batches(uri, calls * 2))
        return
    ledger_costs(InMemoryStore(), "InMemoryStore", n)
    with tempfile.TemporaryDirectory() as tmp:
        ledger_costs(_sqlite_store(os.path.join(tmp, "ledger.db")), "SqliteStore (file)", n)
        batches(_sqlite_store(os.path.join(tmp, "batches.db")), "SqliteStore", calls * 2)
        growth(os.path.join(tmp, "growth.db"), 2000 if opts.quick else 10_000)
    _with_postgres(opts.pg, lambda uri: postgres(uri, 8, calls, n))


def _pg_batches(uri: str, calls: int) -> None:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(uri) as store:
        store.setup()
        batches(store, "PostgresStore", calls)


def _with_postgres(uri: str | None, run: Any) -> None:
    """`run(uri)` on the given server, else on a throwaway local one."""
    if uri:
        run(uri)
        return
    from tests.integration.conftest import _find_binary, _Server

    initdb, pg_ctl = _find_binary("initdb"), _find_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        print("contended claims: skipped (no PostgreSQL binaries; pass --pg URI)")
        return
    server = _Server(initdb, pg_ctl)
    try:
        run(server.start())
    finally:
        server.stop()


if __name__ == "__main__":
    main()
