"""Attacks on Ctrl-C during the guard's own send and wait (`store_cas._sent_and_waited`)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import admit
from langgraph_replay_guard.storage import store_cas
from langgraph_replay_guard.storage.ledger_io import run_plan
from tests import warm_children

from .proc_one_trip import context
from .test_attack_issue36_direct import (
    ROOT,
    _admit,
    _hold_row,
    _interrupted_on,
    _later,
    _run,
    _statements_of_an_admission,
    _thread,
)

pytestmark = pytest.mark.postgres


@pytest.fixture
def store(pg_uri: str) -> Iterator[Any]:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as pg_store:
        pg_store.setup()
        yield pg_store


def _usable_or_closed(conn: Any) -> str:
    """The state, "IDLE", or "closed": never a connection left busy with a statement."""
    if conn.closed:
        return "closed"
    state = conn.info.transaction_status.name
    assert state == "IDLE", state
    return state


def _fresh_answer(pg_uri: str, store: Any, thread: str) -> str:
    """`_later` on the store if its connection is usable, else on a new store."""
    if not store.conn.closed:
        return _later(store, thread)
    import psycopg
    from langgraph.store.postgres import PostgresStore

    with pytest.raises(psycopg.OperationalError):  # a clear error, no reconnection
        _later(store, thread)
    with PostgresStore.from_conn_string(pg_uri) as again:
        return _later(again, thread)


# --- a second Ctrl-C while the guard cancels the first one's statement ------------------------


@pytest.mark.parametrize("second", ["during the cancel", "before the drain"])
@pytest.mark.parametrize("blocked", [False, True])
def test_a_second_ctrl_c_while_the_guard_cancels_leaves_no_busy_connection(
    store, pg_uri, monkeypatch, blocked, second
):
    """The first Ctrl-C lands between the claim's send and its wait; a second one during the
    guard's `cancel_safe` (a new connection to the server: milliseconds, a user pressing
    Ctrl-C again lands there) or as the guard starts reading the cancelled statement's
    result. Neither may leave the statement running, or its result unread, on the
    connection."""
    import psycopg

    at = _statements_of_an_admission(store, pg_uri, monkeypatch)[1] if blocked else 0
    thread, sent = _thread(), []
    holder = _hold_row(pg_uri, thread) if blocked else None
    calls = {at} if second == "during the cancel" else {at, at + 1}
    monkeypatch.setattr(store_cas, "_psycopg", lambda: _interrupted_on(calls, sent))
    if second == "during the cancel":

        def cancel_safe(self: Any, *, timeout: float = 30.0) -> None:
            raise KeyboardInterrupt  # the second Ctrl-C

        monkeypatch.setattr(psycopg.Connection, "cancel_safe", cancel_safe)
    try:
        with pytest.raises(KeyboardInterrupt):
            _admit(store, thread)
        monkeypatch.undo()
        if second == "before the drain":
            assert sent[-2:] == [at, at + 1]  # the send's wait, then the drain's
        state = _usable_or_closed(store.conn)
    finally:
        monkeypatch.undo()
        if holder is not None:
            holder.rollback()
            holder.close()
    answer = _fresh_answer(pg_uri, store, thread)
    assert answer in ("run", "unknown"), (state, answer)
    if state == "IDLE" and not blocked:  # the read was interrupted: no claim was sent
        assert answer == "run"


# --- Ctrl-C on a statement's prepare, then the same connection again -------------------------


def _server_names(conn: Any) -> set[str]:
    with conn.cursor() as cur:
        rows = cur.execute("SELECT name FROM pg_prepared_statements").fetchall()
    return {next(iter(row.values())) if isinstance(row, dict) else row[0] for row in rows}


def test_ctrl_c_on_each_prepare_and_exec_of_a_fresh_connection_keeps_the_names_right(
    pg_uri, monkeypatch
):
    """On a new connection every guard statement is prepared first (`send_prepare`): each
    send of a first admission is interrupted in turn, on a store of its own. The names kept
    as prepared must be prepared on the server, the connection idle, and the call run once."""
    from langgraph.store.postgres import PostgresStore

    cells: list[tuple[int, str]] = []
    statement = 0
    while True:
        with PostgresStore.from_conn_string(pg_uri) as pg_store:
            pg_store.setup()
            thread, sent = _thread(), []
            names = _interrupted_on({statement}, sent)
            monkeypatch.setattr(store_cas, "_psycopg", lambda names=names: names)
            try:
                admission = run_plan(pg_store, admit(context(thread, 0)))
            except KeyboardInterrupt:
                admission = None
            finally:
                monkeypatch.undo()
            if admission is not None:  # past the last send: every one was interrupted once
                owners.REGISTRY.release(admission.entry.owner)
                break
            assert pg_store.conn.info.transaction_status.name == "IDLE", statement
            kept = store_cas._prepared[pg_store.conn].names
            assert {name.decode() for name in kept.values()} <= _server_names(pg_store.conn)
            answer = _later(pg_store, thread)
            assert answer in ("run", "unknown"), (statement, answer)
            if answer == "run":  # the same connection, its names, runs the call once
                effects: list[str] = []
                assert _run(pg_store, _thread(), 0, effects) == "ran"
            assert {n.decode() for n in kept.values()} <= _server_names(pg_store.conn)
            cells.append((statement, answer))
        statement += 1
    assert len(cells) >= 4, cells  # prepares and executions alike were interrupted


# --- a cancel the server does not act on --------------------------------------------------------


def test_ctrl_c_whose_cancel_the_server_ignores_still_ends_within_psycopgs_5_s(
    store, pg_uri, monkeypatch
):
    """A cancel the server does not act on (one reaching the backend before it read the
    statement is ignored): the interrupt still ends the wait after 5 s, as psycopg's own
    wait does (psycopg #1371), and closes the connection, whatever the row lock does."""
    import psycopg

    if not store_cas._psycopg().cancel_wait:
        pytest.skip("psycopg 3.2's wait takes no time limit (a second Ctrl-C ends it there)")

    at = _statements_of_an_admission(store, pg_uri, monkeypatch)[1]  # the claim, held below
    thread, sent = _thread(), []
    holder = _hold_row(pg_uri, thread)
    monkeypatch.setattr(store_cas, "_psycopg", lambda: _interrupted_on({at}, sent))
    monkeypatch.setattr(psycopg.Connection, "cancel_safe", lambda self, *, timeout=30.0: None)
    release = threading.Timer(7.0, holder.rollback)  # the test ends either way
    release.start()
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            _admit(store, thread)
        elapsed = time.monotonic() - start
    finally:
        monkeypatch.undo()
        release.join()
        holder.close()
    _usable_or_closed(store.conn)
    assert _fresh_answer(pg_uri, store, thread) in ("run", "unknown")
    assert elapsed < 6.5, f"Ctrl-C ended only when the row lock was released, {elapsed:.1f} s"


# --- real SIGINTs at random moments to a process admitting calls in a loop --------------------

_LOOP = """
import dataclasses, json, signal, sys
sys.path.insert(0, sys.argv[1])
from langgraph.store.postgres import PostgresStore
from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import admit, finished_entry
from langgraph_replay_guard.storage.ledger_io import run_plan
from tests import warm_children
from tests.integration.proc_one_trip import _outcome, context
uri, thread, effects_path, calls, burst = sys.argv[2:7]
calls, burst = int(calls), int(burst)
left, landed = 0, []

def on_sigint(signum, frame):
    # KeyboardInterrupt where Python's own handler raises it, up to `burst` a call; none in
    # `main` (this process's bookkeeping between calls), which would only kill it.
    global left
    if left > 0 and frame.f_code.co_name != "main":
        left -= 1
        landed.append(frame.f_code.co_filename.rsplit("/", 1)[-1] + ":" + frame.f_code.co_name)
        raise KeyboardInterrupt

signal.signal(signal.SIGINT, on_sigint)
effects = open(effects_path, "a", buffering=1)

def attempt(store, i):
    # This process's owner counts as gone: a claim an interrupt left is "unknown", not re-run.
    ctx = dataclasses.replace(context(thread, i), wait=0.0, is_alive=lambda _: False)
    admission = run_plan(store, admit(ctx))
    if admission.kind != "run":
        return admission.kind
    effects.write(f"{i}\\n")
    run_plan(store, _outcome(ctx, finished_entry(admission.entry, "sent", None, "success")))
    owners.REGISTRY.release(admission.entry.owner)
    return "ran"

def main():
    global left
    stores, states, answers, i = [], [], {}, 0
    stores.append(PostgresStore.from_conn_string(uri))  # kept: a dropped one closes its store
    store = stores[-1].__enter__()
    store.setup()
    print("ready", flush=True)
    while i < calls:
        try:
            left = burst
            answers[i] = attempt(store, i)
            left = 0
            i += 1
        except KeyboardInterrupt:
            left = 0
            conn = store.conn
            states.append("closed" if conn.closed else conn.info.transaction_status.name)
            if conn.closed:
                stores.append(PostgresStore.from_conn_string(uri))
                store = stores[-1].__enter__()
    print(json.dumps({"states": states, "answers": answers, "landed": landed}), flush=True)

main()
"""


def _loop_under_sigints(pg_uri: str, tmp_path: Any, burst: int, seed: int) -> dict[str, Any]:
    """A child admits calls 0..N-1 on its own `PostgresStore` while SIGINTs (`burst` at a
    time, a few hundred microseconds apart) reach it at seeded random moments; each
    interrupted call is tried again (its owner counted as gone). What the child saw."""
    thread, effects = _thread(), tmp_path / f"effects-{burst}.txt"
    effects.touch()
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", _LOOP, str(ROOT), pg_uri, thread, str(effects), "200", str(burst)]
    proc = warm_children.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    rng = random.Random(seed)
    out: list[bytes] = []
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == b"ready", proc.stderr.read()  # type: ignore[union-attr]
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read()))  # type: ignore[union-attr]
        reader.start()
        deadline = time.monotonic() + 4  # then the child ends its calls uninterrupted
        while reader.is_alive() and time.monotonic() < deadline:
            time.sleep(rng.uniform(0.0005, 0.004))
            for n in range(burst):
                if proc.poll() is None:
                    proc.send_signal(signal.SIGINT)
                if n + 1 < burst:
                    time.sleep(rng.uniform(0.0, 0.0008))
        reader.join(30)
        err = proc.stderr.read() if proc.stderr else b""  # type: ignore[union-attr]
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (tmp_path / "child-err.txt").write_bytes(err)
    assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
    seen = json.loads(out[0].decode().strip().splitlines()[-1])
    seen["effects"] = effects.read_text().split()
    return seen


@pytest.mark.parametrize(("burst", "seed"), [(1, 36), (2, 37)])
def test_sigints_at_random_moments_never_leave_a_busy_connection_or_a_second_run(
    pg_uri, tmp_path, burst, seed
):
    seen = _loop_under_sigints(pg_uri, tmp_path, burst, seed)
    states, answers, effects = seen["states"], seen["answers"], seen["effects"]
    assert set(states) <= {"IDLE", "closed"}, states
    assert len(effects) == len(set(effects)), sorted(effects)  # no call ran twice
    assert set(answers.values()) <= {"ran", "replay", "unknown"}, answers
    ran = {i for i, kind in answers.items() if kind == "ran"}
    assert ran <= set(effects)
    assert len(states) >= 20, (len(states), seen["landed"][:20])  # the interrupts did land
    print(
        f"burst={burst}: {len(states)} interrupted calls, states"
        f" { {k: states.count(k) for k in set(states)} },"
        f" {len(effects)} effects, answers "
        f"{ {k: list(answers.values()).count(k) for k in set(answers.values())} },"
        f" in {sorted(set(seen['landed']))}"
    )
