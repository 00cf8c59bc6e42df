"""Attacks on Ctrl-C during the guard's own send and wait (`store_cas._sent_and_waited`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import admit
from langgraph_replay_guard.storage import store_cas
from langgraph_replay_guard.storage.ledger_io import run_plan

from .proc_one_trip import context
from .test_attack_issue36_direct import (
    _hold_row,
    _run,
    _statements_of_an_admission,
    _thread,
)

pytestmark = pytest.mark.postgres

_REAL_PSYCOPG = store_cas._psycopg


@pytest.fixture
def store(pg_uri: str) -> Iterator[Any]:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as pg_store:
        pg_store.setup()
        yield pg_store


def _interrupted_on(calls: set[int], sent: list[int]) -> Any:
    """psycopg's names whose `execute` raises KeyboardInterrupt on its `calls`-th uses (from 0):
    the guard builds one after each send (its wait) and one for the drain after a cancel."""
    real = _REAL_PSYCOPG()

    def execute(pgconn: Any) -> Any:
        sent.append(len(sent))
        if len(sent) - 1 in calls:
            raise KeyboardInterrupt
        return real.execute(pgconn)

    return real._replace(execute=execute)


def _usable_or_closed(conn: Any) -> str:
    """The state, "IDLE", or "closed": never a connection left busy with a statement."""
    if conn.closed:
        return "closed"
    state = conn.info.transaction_status.name
    assert state == "IDLE", state
    return state


def _later(store: Any, thread: str) -> str:
    """What the next process (this one's owner gone) is told for call 0 of `thread`."""
    later = dataclasses.replace(context(thread, 0), wait=0.0, is_alive=lambda _: False)
    return str(run_plan(store, admit(later)).kind)


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


@pytest.mark.parametrize("blocked", [False, True])
def test_a_second_ctrl_c_during_the_cancel_leaves_no_busy_connection(
    store, pg_uri, monkeypatch, blocked
):
    """The first Ctrl-C lands between the claim's send and its wait; a second one during the
    guard's `cancel_safe` (a new connection to the server: milliseconds, a user pressing
    Ctrl-C again lands there). It must not leave the statement running on the connection."""
    import psycopg

    at = _statements_of_an_admission(store, pg_uri, monkeypatch)[1] if blocked else 0
    thread, sent = _thread(), []
    holder = _hold_row(pg_uri, thread) if blocked else None
    monkeypatch.setattr(store_cas, "_psycopg", lambda: _interrupted_on({at}, sent))

    def cancel_safe(self: Any, *, timeout: float = 30.0) -> None:
        raise KeyboardInterrupt  # the second Ctrl-C

    monkeypatch.setattr(psycopg.Connection, "cancel_safe", cancel_safe)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_plan(store, admit(context(thread, 0)))
        monkeypatch.undo()
        state = _usable_or_closed(store.conn)
    finally:
        monkeypatch.undo()
        if holder is not None:
            holder.rollback()
            holder.close()
    answer = _fresh_answer(pg_uri, store, thread)
    assert answer in ("run", "unknown"), (state, answer)
    if state == "IDLE" and not blocked:
        assert answer == "run"


@pytest.mark.parametrize("blocked", [False, True])
def test_a_second_ctrl_c_before_the_drain_leaves_no_busy_connection(
    store, pg_uri, monkeypatch, blocked
):
    """The first Ctrl-C between the send and the wait, the second as the guard starts reading
    the cancelled statement's result: the cancelled statement's result must not stay unread."""
    at = _statements_of_an_admission(store, pg_uri, monkeypatch)[1] if blocked else 0
    thread, sent = _thread(), []
    holder = _hold_row(pg_uri, thread) if blocked else None
    monkeypatch.setattr(store_cas, "_psycopg", lambda: _interrupted_on({at, at + 1}, sent))
    try:
        with pytest.raises(KeyboardInterrupt):
            run_plan(store, admit(context(thread, 0)))
        monkeypatch.undo()
        assert sent[-2:] == [at, at + 1]  # the send's wait, then the drain's
        state = _usable_or_closed(store.conn)
    finally:
        monkeypatch.undo()
        if holder is not None:
            holder.rollback()
            holder.close()
    assert _fresh_answer(pg_uri, store, thread) in ("run", "unknown"), state


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
