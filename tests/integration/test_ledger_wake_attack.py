"""Attacks on issue 36's marked wake-ups and one-statement claim, on real PostgreSQL.

A waiter listens, marks the claim it waits for, then waits; only a marked claim's outcome
notifies. These tests look for the waits that rule can lose (a claim taken over from a dead
holder, two tenants in one store, a holder killed after the mark) and for values the JSON-text
claim could change on the way into the database.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from langgraph_replay_guard.replay import ledger, owners
from langgraph_replay_guard.replay.ledger import (
    Sleep,
    Update,
    Write,
    admit,
    finished_entry,
    index_namespace,
    row_namespace,
    started_entry,
)
from langgraph_replay_guard.storage import store_cas, wake
from langgraph_replay_guard.storage.ledger_io import run_plan
from langgraph_replay_guard.storage.wake_names import channel
from tests import warm_children

from .proc_one_trip import context

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(__file__).with_name("proc_wake_attack.py"))
MARK = "waiting"  # store_cas.WAITING (spelled here: the test also runs against 66baf92)


def _thread() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _subscribed(store: Any, namespace: tuple[str, ...]) -> None:
    """Have this process listen on the namespace's channel (a first, short wait)."""
    wake.pause(store, Sleep(0.05, wake=(namespace, "no-such-row")), time.monotonic())


def _holder(uri: str, thread: str, replay: str) -> subprocess.Popen[bytes]:
    """A worker process holding call 0 of `thread` (its tool body hangs until killed)."""
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    proc = warm_children.popen(
        [sys.executable, SCRIPT, uri, thread, replay],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the claim is stored (or the child died)
    assert line.strip() == b"claimed", proc.communicate(timeout=30)[1].decode()[-2000:]
    return proc


def _wait_for_mark(store: Any, namespace: tuple[str, ...], key: str) -> bool:
    """Whether a waiter marked the row within a second (66baf92 never marks: then False)."""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        item = store.get(namespace, key)
        if item is not None and item.value.get(MARK):
            return True
        time.sleep(0.01)
    return False


def _record(ctx: Any, done: Any) -> Any:
    yield Write(((ctx.rows_ns, done.key, done.to_value()),))


class _Waiter(threading.Thread):
    """A worker of this process admitting a call: it finds the claim in flight and waits."""

    def __init__(self, store: Any, ctx: Any) -> None:
        super().__init__(daemon=True)
        self.store, self.ctx = store, ctx
        self.answer: Any = None
        self.error: BaseException | None = None
        self.done_at = 0.0

    def run(self) -> None:
        try:
            self.answer = run_plan(self.store, admit(self.ctx))
        except BaseException as exc:  # reported by the test
            self.error = exc
        self.done_at = time.monotonic()


def test_a_waiter_marked_on_a_dead_holders_claim_wakes_on_the_takeovers_outcome(
    pg_uri, monkeypatch
):
    """A claim taken over from a dead holder keeps the waiters' mark: its outcome wakes them.

    An idempotent call's holder is SIGKILLed while a waiter sleeps marked on its claim;
    another worker takes the row over (the locked read-then-write, a new claim) and records
    the outcome at once. The waiter must hear that outcome, not sleep out its pause (the
    takeover's claim overwrote the mark, so the outcome sent no notification: a 3 s sleep).
    """
    from langgraph.store.postgres import PostgresStore

    monkeypatch.setattr(ledger, "FIRST_PAUSE", 3.0)
    monkeypatch.setattr(ledger, "LONGEST_PAUSE", 3.0)
    thread = _thread()
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
    holder = _holder(pg_uri, thread, "idempotent")
    ctx = dataclasses.replace(context(thread, 0), replay="idempotent")
    try:
        with (
            PostgresStore.from_conn_string(pg_uri) as mine,
            PostgresStore.from_conn_string(pg_uri) as other,
        ):
            _subscribed(mine, ctx.rows_ns)
            waiter = _Waiter(mine, ctx)
            waiter.start()
            _wait_for_mark(other, ctx.rows_ns, ctx.identity.key)
            time.sleep(0.1)  # the waiter is in its 3 s wait
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
            # Another worker finds the holder dead and takes the call over (idempotent: it
            # runs again with the same key), then records its outcome.
            admission = run_plan(other, admit(ctx))
            assert admission.kind == "run", admission
            assert admission.entry is not None
            done = finished_entry(admission.entry, "sent", None, "success")
            run_plan(other, _record(ctx, done))
            recorded = time.monotonic()
            owners.REGISTRY.release(admission.entry.owner)
            waiter.join(timeout=10)
            assert not waiter.is_alive()
            assert waiter.error is None, waiter.error
            assert waiter.answer.kind == "replay", waiter.answer
            late = waiter.done_at - recorded
            assert late < 1.0, f"the waiter answered {late:.2f} s after the outcome"
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_waiter_marked_on_a_killed_unsafe_holder_answers_unknown_by_polling(
    pg_uri, tmp_path, monkeypatch
):
    """A holder SIGKILLed after a waiter marked its claim: no outcome will ever notify.

    The waiter falls back to polling: it answers "unknown" within its pause (never runs the
    unsafe call again, never waits for its whole `wait`).
    """
    from langgraph.store.postgres import PostgresStore

    monkeypatch.setattr(ledger, "FIRST_PAUSE", 0.5)
    monkeypatch.setattr(ledger, "LONGEST_PAUSE", 0.5)
    thread = _thread()
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
    holder = _holder(pg_uri, thread, "unsafe")
    ctx = context(thread, 0)
    try:
        with PostgresStore.from_conn_string(pg_uri) as mine:
            _subscribed(mine, ctx.rows_ns)
            waiter = _Waiter(mine, ctx)
            waiter.start()
            _wait_for_mark(mine, ctx.rows_ns, ctx.identity.key)
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
            killed = time.monotonic()
            waiter.join(timeout=20)
            assert not waiter.is_alive(), "the waiter never answered"
            assert waiter.error is None, waiter.error
            assert waiter.answer.kind == "unknown", waiter.answer
            assert waiter.done_at - killed < 2.0
            item = mine.get(ctx.rows_ns, ctx.identity.key)
            assert item is not None
            assert item.value["status"] == "started"  # nobody ran it again
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def _tenant_ctx(tenant: str, thread: str) -> Any:
    prefix = ("replay_guard", tenant)
    return dataclasses.replace(
        context(thread, 0),
        rows_ns=row_namespace(prefix, thread),
        index_ns=index_namespace(prefix, thread),
    )


def _claim(store: Any, ctx: Any) -> Any:
    row = started_entry(ctx, args=ctx.args, idempotency_key=None, owner=ctx.new_owner())
    update = Update(ctx.rows_ns, row.key, row.to_value(), False, None)
    written, _ = store_cas.compare_and_set(store, update)
    assert written
    return row


def _outcome(ctx: Any, row: Any) -> list[tuple[tuple[str, ...], str, Any]]:
    done = finished_entry(row, "sent", None, "success")
    return [(ctx.rows_ns, row.key, done.to_value())]


def test_two_tenants_in_one_store_never_wake_each_other(pg_uri):
    """Same thread, same call, two tenants (ledger prefixes): a mark and an outcome stay in one."""
    import psycopg
    from langgraph.store.postgres import PostgresStore

    thread = _thread()
    ours, theirs = _tenant_ctx("a", thread), _tenant_ctx("b", thread)
    assert channel(ours.rows_ns) != channel(theirs.rows_ns)
    with (
        PostgresStore.from_conn_string(pg_uri) as store,
        psycopg.connect(pg_uri, autocommit=True) as spy,
    ):
        store.setup()
        spy.execute(f'LISTEN "{channel(theirs.rows_ns)}"')
        our_row, their_row = _claim(store, ours), _claim(store, theirs)
        assert our_row.key == their_row.key
        _subscribed(store, ours.rows_ns)
        times: list[float] = []
        waiter = threading.Thread(
            target=lambda: (
                wake.pause(store, Sleep(4.0, wake=(ours.rows_ns, our_row.key)), time.monotonic()),
                times.append(time.monotonic()),
            ),
            daemon=True,
        )
        waiter.start()
        with PostgresStore.from_conn_string(pg_uri) as other:
            assert _wait_for_mark(other, ours.rows_ns, our_row.key)
            item = other.get(theirs.rows_ns, their_row.key)
            assert item is not None
            assert MARK not in item.value  # the mark is on our tenant's row only
            # Their outcome: no notification (nobody waits there), and ours keeps waiting.
            assert store_cas.write_rows(other, _outcome(theirs, their_row))
            assert [n.payload for n in spy.notifies(timeout=0.3)] == []
            assert waiter.is_alive()
            assert store_cas.write_rows(other, _outcome(ours, our_row))
            recorded = time.monotonic()
        waiter.join(timeout=10)
        assert times
        assert times[0] - recorded < 1.0
        for ctx, row in ((ours, our_row), (theirs, their_row)):
            owners.REGISTRY.release(row.owner)
            item = store.get(ctx.rows_ns, row.key)
            assert item is not None
            assert item.value["status"] == "completed"
            assert MARK not in item.value


HOSTILE_THREADS = [
    "quote ' and \" and \\ backslash",
    "unicode üñí 𝄞 \u2028 \u2029 é",
    'json-ish {"a": [1]} ->> 0 ; DROP TABLE store; --',
    "x" * 2000,
]

HOSTILE_VALUE: dict[str, Any] = {
    "quotes": "' \" \\ \\\\ \\u0000 (a literal backslash-u, not a NUL)",
    "unicode": "𝄞 \u2028 \u2029 \ufeff é ü",
    "ints": [0, -1, 2**53 + 1, 2**63 - 1, -(2**63), 2**64 - 1],
    "floats": [0.1, 0.1 + 0.2, 1e-300, 1.5e15, -2.5],
    "nested": {"a": [{"b": None, "c": True, "d": False}], "": "empty key"},
    "big": "y" * 200_000,
}


@pytest.mark.parametrize("thread_text", HOSTILE_THREADS, ids=range(len(HOSTILE_THREADS)))
def test_odd_rows_round_trip_through_the_one_statement_claim(pg_uri, thread_text):
    """A claim and its lookup rows, with hostile text and numbers, read back exactly."""
    import psycopg
    from langgraph.store.postgres import PostgresStore

    ctx = context(thread_text, 0)
    value = {**HOSTILE_VALUE, "status": "started", "rev": "r1"}
    also_value = {"key": ctx.identity.key, "odd": HOSTILE_VALUE["quotes"], "n": 2**64 - 1}
    also = ((ctx.index_ns, "tc/" + thread_text[:100], also_value),)
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        update = Update(ctx.rows_ns, ctx.identity.key, value, False, None, also=also)
        assert store_cas.compare_and_set(store, update)[0]
        item = store.get(ctx.rows_ns, ctx.identity.key)
        assert item is not None
        assert item.value == value
        pointer = store.get(ctx.index_ns, "tc/" + thread_text[:100])
        assert pointer is not None
        assert pointer.value == also_value
        # A second claim of the same row finds it (no overwrite) and returns it as stored.
        written, current = store_cas.compare_and_set(store, update)
        assert not written
        assert current == value
        # The same value as the store's own `put` writes it (the standard library's encoder,
        # as 66baf92 wrote ledger rows): the same jsonb, so old rows and new compare equal.
        store.put(("old",), "row", value)
        with psycopg.connect(pg_uri) as conn:
            row = conn.execute(
                "SELECT a.value = b.value FROM store a, store b "
                "WHERE a.prefix = %s AND a.key = %s AND b.prefix = 'old' AND b.key = 'row'",
                (".".join(ctx.rows_ns), ctx.identity.key),
            ).fetchone()
        assert row == (True,)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("nul \x00 inside", id="nul"),
        pytest.param("lone \ud800 surrogate", id="surrogate"),
        pytest.param(2**64, id="int-past-u64"),
    ],
)
def test_a_claim_of_a_value_postgres_cannot_store_writes_nothing(pg_uri, bad):
    """An unstorable value fails the claim loudly, with neither the row nor its lookup written."""
    from langgraph.store.postgres import PostgresStore

    ctx = context(_thread(), 0)
    value = {"status": "started", "rev": "r1", "odd": bad}
    also = ((ctx.index_ns, "tc/call-0", {"key": ctx.identity.key}),)
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        update = Update(ctx.rows_ns, ctx.identity.key, value, False, None, also=also)
        with pytest.raises(Exception):  # noqa: B017, PT011  (orjson's or PostgreSQL's error)
            store_cas.compare_and_set(store, update)
        assert store.get(ctx.rows_ns, ctx.identity.key) is None
        assert store.get(ctx.index_ns, "tc/call-0") is None
        # The connection is still usable (no transaction left open by the failed claim).
        ok = Update(ctx.rows_ns, ctx.identity.key, {"status": "started", "rev": "r2"}, False, None)
        assert store_cas.compare_and_set(store, ok)[0]


def test_sync_and_async_waiters_of_one_row_all_wake_on_its_outcome(pg_uri):
    """Two sync waiters and two async ones (each API its own listener) hear one outcome."""
    import asyncio

    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.aio import AsyncPostgresStore

    ctx = context(_thread(), 0)
    woken: list[float] = []
    lock = threading.Lock()

    def stamp() -> None:
        with lock:
            woken.append(time.monotonic())

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        row = _claim(store, ctx)
        _subscribed(store, ctx.rows_ns)
        since = time.monotonic()

        def sync_wait() -> None:
            wake.pause(store, Sleep(5.0, wake=(ctx.rows_ns, row.key)), since)
            stamp()

        async def async_waits() -> None:
            async with AsyncPostgresStore.from_conn_string(pg_uri) as astore:
                await wake.apause(astore, Sleep(0.05, wake=(ctx.rows_ns, "no-such-row")), 0)

                async def one() -> None:
                    await wake.apause(astore, Sleep(5.0, wake=(ctx.rows_ns, row.key)), since)
                    stamp()

                await asyncio.gather(one(), one())

        workers = [threading.Thread(target=sync_wait, daemon=True) for _ in range(2)]
        workers.append(threading.Thread(target=asyncio.run, args=(async_waits(),), daemon=True))
        for worker in workers:
            worker.start()
        time.sleep(1.0)  # every waiter listens, has marked the row and waits
        item = store.get(ctx.rows_ns, row.key)
        assert item is not None
        assert item.value.get(MARK) is True
        with PostgresStore.from_conn_string(pg_uri) as other:
            assert store_cas.write_rows(other, _outcome(ctx, row))
        recorded = time.monotonic()
        for worker in workers:
            worker.join(timeout=10)
        owners.REGISTRY.release(row.owner)
    assert len(woken) == 4
    assert max(woken) - recorded < 1.0, [round(t - recorded, 3) for t in woken]


def test_a_waiter_whose_listen_connection_is_killed_after_its_mark_polls(pg_uri):
    """The LISTEN backend terminated between the mark and the outcome: a poll, never forever."""
    import psycopg
    from langgraph.store.postgres import PostgresStore

    ctx = context(_thread(), 0)
    with (
        PostgresStore.from_conn_string(pg_uri) as store,
        psycopg.connect(pg_uri, autocommit=True) as admin,
    ):
        store.setup()
        row = _claim(store, ctx)
        _subscribed(store, ctx.rows_ns)
        done: list[float] = []
        waiter = threading.Thread(
            target=lambda: (
                wake.pause(store, Sleep(2.0, wake=(ctx.rows_ns, row.key)), time.monotonic()),
                done.append(time.monotonic()),
            ),
            daemon=True,
        )
        started = time.monotonic()
        waiter.start()
        assert _wait_for_mark(store, ctx.rows_ns, row.key)
        killed = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
        ).fetchall()
        assert killed
        assert store_cas.write_rows(store, _outcome(ctx, row))
        waiter.join(timeout=10)
        assert done, "the waiter never returned"
        # It polls out the rest of its pause (2 s): not woken, not stuck past it.
        assert done[0] - started < 3.0
        owners.REGISTRY.release(row.owner)


def test_workers_racing_to_take_over_a_killed_holders_call_run_it_once(pg_uri, tmp_path):
    """Six processes at a barrier admit an idempotent call whose holder was SIGKILLed.

    One takes it over and runs it (the locked read-then-write decides on the row's
    revision); the others wait on its claim and replay its outcome, woken by it (their
    pauses are 3 s: a lost wake-up answers seconds late).
    """
    import json

    from langgraph.store.postgres import PostgresStore

    thread, workers = _thread(), 6
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
    holder = _holder(pg_uri, thread, "idempotent")
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    effects, barrier = tmp_path / "effects.txt", tmp_path / "ready"
    barrier.mkdir()
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    args = [pg_uri, thread, "idempotent", str(effects), str(barrier), str(workers)]
    procs = [
        warm_children.popen(
            [sys.executable, SCRIPT, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(workers)
    ]
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
        answers.append(json.loads(out.decode().strip().splitlines()[-1]))
    assert len(effects.read_text().splitlines()) == 1  # run once, by one of them
    kinds = sorted(a["kind"] for a in answers)
    assert kinds == ["replay"] * (workers - 1) + ["run"], kinds
    ran_at = next(a["at"] for a in answers if a["kind"] == "run")
    late = [a["at"] - ran_at for a in answers if a["kind"] == "replay"]
    assert max(late) < 1.0, sorted(late)
    ctx = context(thread, 0)
    with PostgresStore.from_conn_string(pg_uri) as store:
        item = store.get(ctx.rows_ns, ctx.identity.key)
        assert item is not None
        assert item.value["status"] == "completed"


def test_a_waiter_gives_up_at_its_wait_not_a_pause_later(pg_uri):
    """A live holder never finishes: the waiter raises at `wait` seconds, not after a long pause.

    Its pauses double (20 ms ... 0.5 s); the last one was not cut to the time left, so a
    0.7 s wait raised after about 1.1 s (a whole pause past it).
    """
    from langgraph.store.postgres import PostgresStore

    from langgraph_replay_guard.errors import ReplayInFlightError

    thread = _thread()
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
    holder = _holder(pg_uri, thread, "unsafe")
    try:
        ctx = dataclasses.replace(context(thread, 0), wait=0.7)
        with PostgresStore.from_conn_string(pg_uri) as store:
            _subscribed(store, ctx.rows_ns)
            started = time.monotonic()
            with pytest.raises(ReplayInFlightError):
                run_plan(store, admit(ctx))
            took = time.monotonic() - started
        assert 0.7 <= took < 0.9, f"gave up after {took:.2f} s of a 0.7 s wait"
    finally:
        holder.kill()
        holder.wait()


def _takeover(ctx: Any, row: Any) -> Update:
    """A new claim of `row` (another owner, same revision compared), as `admit` writes it."""
    new = started_entry(ctx, args=ctx.args, idempotency_key=None, owner=None)
    return Update(ctx.rows_ns, row.key, new.to_value(), True, row.rev)


@pytest.mark.parametrize("path", ["autocommit", "batch", "pipeline", "async"])
def test_every_compare_and_set_path_keeps_the_mark_on_a_takeover(pg_uri, path):
    """The takeover's claim keeps the mark on each PostgreSQL compare-and-set path.

    A settled value written over a marked claim (a resolution) drops it: it is no claim.
    """
    import asyncio

    from langgraph.store.postgres import PostgresStore
    from langgraph.store.postgres.aio import AsyncPostgresStore

    ctx = context(_thread(), 0)
    other = context(ctx.identity.thread_id, 1)
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()  # not in pipeline mode (its migrations cannot run there)
    with PostgresStore.from_conn_string(pg_uri, pipeline=path == "pipeline") as store:
        row = _claim(store, ctx)
        owners.REGISTRY.release(row.owner)
        assert store_cas.mark_waiting(store, ctx.rows_ns, row.key)
        update = _takeover(ctx, row)
        if path == "batch":
            fresh = started_entry(other, args=other.args, idempotency_key=None, owner=None)
            claim_other = Update(other.rows_ns, fresh.key, fresh.to_value(), False, None)
            answers = store_cas.compare_and_set_many(store, [update, claim_other])
            assert [written for written, _ in answers] == [True, True]
        elif path == "async":

            async def run() -> tuple[bool, Any]:
                async with AsyncPostgresStore.from_conn_string(pg_uri) as astore:
                    return await store_cas.acompare_and_set(astore, update)

            assert asyncio.run(run())[0]
        else:
            assert store_cas.compare_and_set(store, update)[0]
        item = store.get(ctx.rows_ns, row.key)
        assert item is not None
        assert item.value["rev"] == update.value["rev"] != row.rev
        assert item.value.get(MARK) is True
        # A resolution (a settled value) over the marked claim: no mark kept.
        settled = finished_entry(_entry_of(item.value, row.key), "done", None, "success")
        resolved = Update(ctx.rows_ns, row.key, settled.to_value(), True, item.value["rev"])
        assert store_cas.compare_and_set(store, resolved)[0]
        item = store.get(ctx.rows_ns, row.key)
        assert item is not None
        assert MARK not in item.value


def _entry_of(value: dict[str, Any], key: str) -> Any:
    from langgraph_replay_guard.replay.ledger import LedgerEntry

    return LedgerEntry.from_value(key, value)


def test_a_mark_committed_between_the_takeovers_read_and_write_is_kept(pg_uri, monkeypatch):
    """A waiter marks the old claim after the takeover read it under the lock, before it wrote.

    The mark takes no advisory lock, so it commits in that gap; the takeover's upsert reads
    the row's newest version and keeps it (its outcome then notifies that waiter).
    """
    from langgraph.store.postgres import PostgresStore

    ctx = context(_thread(), 0)
    with (
        PostgresStore.from_conn_string(pg_uri) as store,
        PostgresStore.from_conn_string(pg_uri) as waiter,
    ):
        store.setup()
        row = _claim(store, ctx)
        owners.REGISTRY.release(row.owner)
        decide = store_cas._decide
        marked: list[bool | None] = []

        def decide_then_mark(current: Any, op: Update) -> tuple[bool, Any]:
            answer = decide(current, op)
            assert current is not None
            assert MARK not in current  # read before the mark
            marked.append(store_cas.mark_waiting(waiter, ctx.rows_ns, row.key))
            return answer

        monkeypatch.setattr(store_cas, "_decide", decide_then_mark)
        assert store_cas.compare_and_set(store, _takeover(ctx, row))[0]
        assert marked == [True]
        item = store.get(ctx.rows_ns, row.key)
        assert item is not None
        assert item.value["rev"] != row.rev
        assert item.value.get(MARK) is True
