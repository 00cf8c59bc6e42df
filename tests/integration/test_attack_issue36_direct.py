"""Attacks on the guard's statements sent through libpq itself (`store_cas._direct`, issue 36).

What the cursor path did on c9cb1d9 the direct path must keep doing when things go wrong: a
key with a NUL refused (libpq would cut it at the NUL, another row's key), Ctrl-C ending a
statement blocked on a row lock, a connection the server closed raising psycopg's class for
the server's error, the user's own session settings between two calls, hostile keys, and
psycopg's pure-Python implementation racing its C one. Each call still runs at most once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import CallIdentity, admit, finished_entry
from langgraph_replay_guard.storage import store_cas
from langgraph_replay_guard.storage.ledger_io import run_plan
from tests import warm_children

from .proc_one_trip import _outcome, context, race

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]


def _thread() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _start(argv: list[str], **kwargs: Any) -> Any:
    """Start a child on the psycopg implementation its `PSYCOPG_IMPL` names: forked from a warm
    zygote when that is the implementation this interpreter (and so the zygote) imported,
    else a fresh interpreter, which imports the one named (psycopg reads the variable once,
    at import)."""
    import psycopg.pq

    if kwargs["env"].get("PSYCOPG_IMPL") == psycopg.pq.__impl__:
        return warm_children.popen(argv, **kwargs)
    return subprocess.Popen(argv, **kwargs)


def _run(store: Any, thread: str, i: int, effects: list[str], call: str | None = None) -> str:
    """Admit call `i` (its tool call id `call`); if told to run it, note its effect, record it."""
    ctx = context(thread, i)
    if call is not None:
        ctx = dataclasses.replace(ctx, identity=CallIdentity(thread, "tools", f"ai-{i}", call))
    admission = run_plan(store, admit(ctx))
    if admission.kind == "replay":
        return "replayed"
    assert admission.kind == "run", admission
    effects.append(f"{thread}/{i}")
    done = finished_entry(admission.entry, f"sent {i}", None, "success")
    run_plan(store, _outcome(ctx, done))
    owners.REGISTRY.release(admission.entry.owner)
    return "ran"


def _in(where: str, fn: Callable[[], Any]) -> Any:
    """`fn()` on this (the main) thread or on another one (libpq's blocking call there)."""
    if where == "main thread":
        return fn()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed back to the test's thread
            box["error"] = exc

    worker = threading.Thread(target=target)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the statement never ended"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.fixture
def store(pg_uri: str) -> Iterator[Any]:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as pg_store:
        pg_store.setup()
        yield pg_store


def _hold_row(pg_uri: str, thread: str, i: int = 0) -> Any:
    """Another connection's open transaction inserting call `i`'s ledger row: its claim waits."""
    import psycopg

    holder = psycopg.connect(pg_uri)
    holder.execute(
        "INSERT INTO store (prefix, key, value) VALUES (%s, %s, '{}')",
        [f"replay_guard.ledger.{thread}", f"tools/ai-{i}/call-{i}"],
    )
    return holder


# --- a NUL in a key: libpq reads a text parameter up to its first NUL -------------------------


@pytest.mark.parametrize("where", ["main thread", "worker thread"])
def test_a_key_with_a_nul_is_refused_not_read_as_the_key_before_it(store, where):
    import psycopg

    ns = ("replay_guard", "ledger", _thread())
    store.put(ns, "k", {"status": "done", "result": "k's outcome"})
    with pytest.raises(psycopg.DataError, match="NUL"):
        _in(where, lambda: store_cas.read_rows(store, [(ns, "k\x00other")]))
    with pytest.raises(psycopg.DataError, match="NUL"):
        _in(where, lambda: store_cas.mark_waiting(store, ns, "k\x00other"))
    assert store.get(ns, "k").value == {"status": "done", "result": "k's outcome"}


def test_a_tool_call_id_with_a_nul_is_refused_with_psycopgs_error_naming_it(store):
    import psycopg

    thread, effects = _thread(), []
    assert _run(store, thread, 0, effects, call="c") == "ran"
    with pytest.raises(psycopg.DataError, match="NUL"):
        _run(store, thread, 0, effects, call="c\x00b")
    assert effects == [f"{thread}/0"]
    assert _run(store, thread, 0, effects, call="c") == "replayed"


# --- Ctrl-C on a statement blocked on a row lock ------------------------------------------------

_BLOCKED = """
import json, signal, sys, time
# Ctrl-C as an interactive Python takes it: a run started in the background by a shell without
# job control (`make test &` in a script) ignores SIGINT, and Python keeps an ignored SIGINT.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, sys.argv[1])
from langgraph.store.postgres import PostgresStore
from langgraph_replay_guard.storage import store_cas
from tests.integration.test_attack_issue36_direct import _run
uri, what, thread, effects = sys.argv[2:6]
ns = ("replay_guard", "ledger", thread)
ran = []
with PostgresStore.from_conn_string(uri) as store:
    store_cas.read_rows(store, [(ns, "warm")])  # prepared before the lock, as in a long run
    import psycopg.pq
    print("ready", psycopg.pq.__impl__, flush=True)
    start = time.monotonic()
    try:
        if what == "claim":
            _run(store, thread, 0, ran)
        elif what == "outcome":
            store_cas.write_rows(store, [(ns, "tools/ai-0/call-0", {"status": "done"})])
        else:
            store_cas.mark_waiting(store, ns, "tools/ai-0/call-0")
        print(json.dumps({"ended": "returned"}), flush=True)
    except KeyboardInterrupt:
        state = store.conn.info.transaction_status.name
        print(json.dumps({"ended": "interrupted", "state": state}), flush=True)
    with open(effects, "w") as file:
        file.write(json.dumps(ran))
"""


def _wait_until_blocked(uri: str) -> None:
    """Return once a backend of this test's database waits for a row lock.

    A fixed sleep raced the child under load: a Ctrl-C sent before its statement reached the
    server tested something else. `pg_stat_activity` is read on a connection of its own (a
    transaction keeps one snapshot of it).
    """
    import psycopg

    deadline = time.monotonic() + 60
    with psycopg.connect(uri, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
            if row is not None and row[0]:
                return
            time.sleep(0.02)
    pytest.fail("the child's statement never waited for the holder's row lock")


@pytest.mark.parametrize(
    ("what", "impl"),
    [("claim", "binary"), ("claim", "python"), ("outcome", "binary"), ("mark", "binary")],
)
def test_ctrl_c_ends_a_guard_statement_blocked_on_a_row_lock(store, pg_uri, tmp_path, what, impl):
    thread, effects = _thread(), tmp_path / "effects.json"
    if what == "claim":
        holder = _hold_row(pg_uri, thread)
    else:  # an outcome and a mark update call 0's row, locked by another transaction
        store.put(("replay_guard", "ledger", thread), "tools/ai-0/call-0", {"status": "started"})
        import psycopg

        holder = psycopg.connect(pg_uri)
        holder.execute(
            "SELECT 1 FROM store WHERE prefix = %s AND key = %s FOR UPDATE",
            [f"replay_guard.ledger.{thread}", "tools/ai-0/call-0"],
        )
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
    env["PSYCOPG_IMPL"] = impl  # psycopg's C and pure-Python implementations alike
    argv = [sys.executable, "-c", _BLOCKED, str(ROOT), pg_uri, what, thread, str(effects)]
    proc = _start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline().strip()
        assert ready == f"ready {impl}".encode(), proc.stderr.read() if proc.stderr else ""
        _wait_until_blocked(pg_uri)  # the statement is now waiting for the holder's lock
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            holder.rollback()  # let it end, then fail with what it said
            out, err = proc.communicate(timeout=60)
            said = (out + err).decode(errors="replace")[-3000:]
            pytest.fail(f"Ctrl-C did not end the blocked {what} statement within 10 s:\n{said}")
    finally:
        holder.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]
    assert json.loads(out.decode().strip().splitlines()[-1]) == {
        "ended": "interrupted",
        "state": "IDLE",  # cancelled on the server: the connection is usable again
    }
    assert json.loads(effects.read_text()) == []
    if what == "claim":  # the call never ran: the next worker runs it, once
        ran: list[str] = []
        assert _run(store, thread, 0, ran) == "ran"
        assert _run(store, thread, 0, ran) == "replayed"
        assert ran == [f"{thread}/0"]


_REAL_PSYCOPG = store_cas._psycopg


def _interrupted_on(calls: set[int], sent: list[int]) -> Any:
    """psycopg's names whose `execute` raises KeyboardInterrupt on its `calls`-th uses (from 0),
    as a Ctrl-C landing after a statement's send and before psycopg's wait starts (a process
    descheduled there): the guard builds one after each send (its wait) and one for the drain
    after a cancel. `sent` counts the uses."""
    real = _REAL_PSYCOPG()

    def execute(pgconn: Any) -> Any:
        sent.append(len(sent))
        if len(sent) - 1 in calls:
            raise KeyboardInterrupt
        return real.execute(pgconn)

    return real._replace(execute=execute)


def _admit(store: Any, thread: str) -> Any:
    return run_plan(store, admit(context(thread, 0)))


def _later(store: Any, thread: str) -> str:
    """What the next process (this one's owner gone) is told for call 0 of `thread`."""
    later = dataclasses.replace(context(thread, 0), wait=0.0, is_alive=lambda _: False)
    return str(run_plan(store, admit(later)).kind)


def _statements_of_an_admission(store: Any, pg_uri: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """(how many statements a call's admission sends, the one that waits for a held row),
    on a connection that prepared them already."""
    owners.REGISTRY.release(_admit(store, _thread()).entry.owner)  # prepares them
    thread, sent, blocking = _thread(), [], []
    holder = _hold_row(pg_uri, thread)

    def release() -> None:
        _wait_until_blocked(pg_uri)
        blocking.append(len(sent) - 1)
        holder.rollback()

    releaser = threading.Thread(target=release)
    releaser.start()
    monkeypatch.setattr(store_cas, "_psycopg", lambda: _interrupted_on(set(), sent))
    try:
        owners.REGISTRY.release(_admit(store, thread).entry.owner)
    finally:
        monkeypatch.undo()
        releaser.join(60)
        holder.close()
    return len(sent), blocking[0]


def test_ctrl_c_between_a_statements_send_and_its_wait_leaves_the_connection_usable(
    store, pg_uri, monkeypatch
):
    """Each statement of a call's admission, interrupted between its send and psycopg's
    wait (the claim also while it waits for a row another transaction holds): the interrupt
    reaches the caller, the statement is cancelled on the server (the connection is idle,
    not "another command is already in progress"), and the call still runs, once."""
    count, blocking = _statements_of_an_admission(store, pg_uri, monkeypatch)
    cells = [(statement, False) for statement in range(count)] + [(blocking, True)]
    for statement, blocked in cells:
        thread, sent = _thread(), []
        holder = _hold_row(pg_uri, thread) if blocked else None
        names = _interrupted_on({statement}, sent)
        monkeypatch.setattr(store_cas, "_psycopg", lambda names=names: names)
        try:
            with pytest.raises(KeyboardInterrupt):
                _admit(store, thread)
        finally:
            monkeypatch.undo()
            if holder is not None:
                holder.rollback()
                holder.close()
        assert store.conn.info.transaction_status.name == "IDLE", (statement, blocked)
        # The next process (this one's owner is gone) runs the call if the interrupted
        # statement left no claim, or finds its outcome unknown if the claim was committed
        # before the cancel reached the server: never a second run.
        again = _later(store, thread)
        if blocked or statement < blocking:  # cancelled before the claim could be written
            assert again == "run", (statement, blocked, again)
        else:
            assert again in ("run", "unknown"), (statement, again)


# --- the connection closed by the server -------------------------------------------------------


@pytest.mark.parametrize("where", ["main thread", "worker thread"])
@pytest.mark.parametrize("when", ["idle", "blocked claim"])
def test_a_terminated_connection_raises_admin_shutdown_and_the_call_never_runs(
    store, pg_uri, where, when
):
    import psycopg

    thread, effects = _thread(), []
    assert _run(store, thread, 1, effects) == "ran"  # the statements are prepared
    pid = store.conn.info.backend_pid
    holder = _hold_row(pg_uri, thread) if when == "blocked claim" else None

    def terminate() -> None:
        time.sleep(1.0 if holder is not None else 0.0)
        with psycopg.connect(pg_uri, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", [pid])

    killer = threading.Thread(target=terminate)
    killer.start()
    if holder is None:
        killer.join()
    # Off the main thread libpq's `PQexecPrepared` keeps only its last result ("server closed
    # the connection"), not the server's 57P01: psycopg's OperationalError, naming the cause.
    expected = psycopg.errors.AdminShutdown if where == "main thread" else psycopg.OperationalError
    try:
        with pytest.raises(expected, match="terminating connection due to administrator command"):
            _in(where, lambda: _run(store, thread, 0, effects))
    finally:
        killer.join()
        if holder is not None:
            holder.close()
    assert store.conn.closed
    with pytest.raises(psycopg.OperationalError):
        _run(store, thread, 0, effects)  # no reconnection: psycopg's own error, as before
    assert effects == [f"{thread}/1"]
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as again:  # a new store runs it, once
        assert _run(again, thread, 0, effects) == "ran"
        assert _run(again, thread, 0, effects) == "replayed"
        assert _run(again, thread, 1, effects) == "replayed"
    assert effects == [f"{thread}/1", f"{thread}/0"]


@pytest.mark.parametrize(
    ("setting", "error"),
    [("statement_timeout = 300", "QueryCanceled"), ("lock_timeout = 300", "LockNotAvailable")],
)
def test_a_timeout_ends_a_blocked_claim_and_the_next_call_runs_once(store, pg_uri, setting, error):
    import psycopg

    thread, effects = _thread(), []
    assert _run(store, thread, 1, effects) == "ran"
    store.conn.execute(f"SET {setting}")
    holder = _hold_row(pg_uri, thread)
    try:
        start = time.monotonic()
        with pytest.raises(getattr(psycopg.errors, error)):
            _run(store, thread, 0, effects)
        assert time.monotonic() - start < 10
    finally:
        holder.close()
    assert _run(store, thread, 0, effects) == "ran"
    assert _run(store, thread, 0, effects) == "replayed"
    assert effects == [f"{thread}/1", f"{thread}/0"]


# --- the user's own use of the store's connection between two calls --------------------------


def _dict_row(conn: Any) -> None:
    from psycopg.rows import dict_row

    conn.row_factory = dict_row


def _other_schema(conn: Any) -> None:
    conn.execute("CREATE SCHEMA other")
    conn.execute("CREATE TABLE other.store (LIKE public.store INCLUDING ALL)")
    conn.execute("SET search_path TO other, public")


def _open_transaction(conn: Any) -> None:
    conn.execute("BEGIN")


def _no_autocommit(conn: Any) -> None:
    conn.autocommit = False


_SESSIONS: dict[str, Callable[[Any], None]] = {
    "row_factory=dict_row": _dict_row,
    "prepare_threshold=None": lambda conn: setattr(conn, "prepare_threshold", None),
    "prepare_threshold=0": lambda conn: setattr(conn, "prepare_threshold", 0),
    "client_encoding LATIN1": lambda conn: conn.execute("SET client_encoding TO LATIN1"),
    "search_path to another store table": _other_schema,
    "an open transaction": _open_transaction,
    "autocommit off": _no_autocommit,
    "idle_in_transaction_session_timeout": lambda conn: conn.execute(
        "SET idle_in_transaction_session_timeout = 1"
    ),
    "DEALLOCATE ALL and RESET ALL": lambda conn: (
        conn.execute("DEALLOCATE ALL"),
        conn.execute("RESET ALL"),
    ),
}


@pytest.mark.parametrize("session", list(_SESSIONS))
def test_the_users_session_changes_between_two_calls_keep_each_call_once(store, session):
    thread, effects = _thread(), []
    assert _run(store, thread, 0, effects) == "ran"
    _SESSIONS[session](store.conn)
    answers = [_run(store, thread, i, effects) for i in (0, 1, 1, 2)]
    if session == "search_path to another store table":
        # The statements follow the search_path to the other (empty) table, as psycopg's
        # cursor did on c9cb1d9 (the server plans a prepared statement again on a change).
        assert answers == ["ran", "ran", "replayed", "ran"]
    else:
        assert answers == ["replayed", "ran", "replayed", "ran"]
        assert sorted(effects) == sorted(f"{thread}/{i}" for i in (0, 1, 2))


# --- hostile keys -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    ["50%s", "%s%%", "$1", "$2::text'; DROP TABLE store; --", "é€😀", "x" * 200_000],
)
def test_hostile_tool_call_ids_are_keys_like_any_other(store, call):
    thread, effects = _thread(), []
    assert _run(store, thread, 0, effects, call=call) == "ran"
    assert _run(store, thread, 0, effects, call=call) == "replayed"
    assert _run(store, thread, 0, effects, call=call + "-other") == "ran"
    assert effects == [f"{thread}/0", f"{thread}/0"]
    ns = ("replay_guard", "ledger", thread)
    assert store.get(ns, f"tools/ai-0/{call}") is not None


def test_an_unencodable_surrogate_is_refused_before_anything_is_sent(store):
    thread, effects = _thread(), []
    with pytest.raises(UnicodeEncodeError):
        _run(store, thread, 0, effects, call="c\udcff")
    assert effects == []
    assert _run(store, thread, 0, effects) == "ran"


# --- psycopg's pure-Python implementation ----------------------------------------------------


def test_processes_on_psycopgs_python_and_c_implementations_run_each_call_once(pg_uri, tmp_path):
    impls = ["binary", "python", "binary", "python"]
    for impl in set(impls):
        env = {**os.environ, "PSYCOPG_IMPL": impl}
        check = f"import psycopg.pq; assert psycopg.pq.__impl__ == {impl!r}, psycopg.pq.__impl__"
        probe = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True)
        assert probe.returncode == 0, probe.stderr.decode()[-500:]
    # The pure-Python workers are fresh interpreters, which import the implementation their
    # variable names; the C ones are warm forks of a zygote that imported it (`_start`).
    result = race(
        pg_uri,
        tmp_path,
        ["one"] * len(impls),
        calls=20,
        env=lambda n: {"PSYCOPG_IMPL": impls[n]},
        start=_start,
    )
    thread, calls = result.thread, result.calls
    assert sorted(result.effects) == sorted(f"{thread}/{i}" for i in range(calls))
    assert sorted(result.ran) == list(range(calls))


# --- the user's own pipeline and dumpers on the store's connection ---------------------------


def test_calls_inside_the_users_pipeline_on_the_store_connection_run_once(store):
    thread, effects = _thread(), []
    with store.conn.pipeline():  # libpq's pipeline mode: the cursor path, as on c9cb1d9
        assert [_run(store, thread, 0, effects) for _ in range(2)] == ["ran", "replayed"]
    assert [_run(store, thread, i, effects) for i in (0, 1, 1)] == ["replayed", "ran", "replayed"]
    assert effects == [f"{thread}/0", f"{thread}/1"]


def test_a_str_dumper_registered_on_the_store_connection_applies_to_the_guards_keys(store):
    """The direct path encodes `str` itself: with the user's dumper, the guard's statements
    go through a cursor, as the store's own do (else one key would be two rows)."""
    from psycopg.types.string import StrDumper

    class Upper(StrDumper):  # type: ignore[misc]
        def dump(self, obj: str) -> Any:
            return super().dump(obj.upper())

    store.conn.adapters.register_dumper(str, Upper)
    assert store.conn.execute("SELECT %s::text AS t", ["abc"]).fetchone()["t"] == "ABC"
    assert store_cas._statement(store, store.conn, "SELECT %s::text", ["abc"]) == [("ABC",)]


# --- the server stopped and restarted under a store with prepared statements -----------------


@pytest.fixture(scope="module")
def own_server() -> Iterator[tuple[Any, str]]:
    """A server of this module's own, which its tests restart (not the worker's shared one),
    with its URI: created once (`initdb` is about 1 s of CPU) for the tests that restart it,
    each on a thread of its own."""
    from .conftest import _find_binary, _Server

    initdb, pg_ctl = _find_binary("initdb"), _find_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("no PostgreSQL server binaries to restart a server of this test's own")
    server = _Server(initdb, pg_ctl)
    try:
        yield server, server.start()
    finally:
        server.stop()


@pytest.mark.parametrize("where", ["main thread", "worker thread"])
def test_a_server_restart_between_and_inside_a_call_keeps_each_call_once(own_server, where):
    import psycopg
    from langgraph.store.postgres import PostgresStore

    server, uri = own_server

    def restart(mode: str) -> None:
        data, log = str(server.data), str(server.log)
        server._run(server.pg_ctl, "-D", data, "-l", log, "-m", mode, "-w", "restart")

    thread, effects = _thread(), []
    with PostgresStore.from_conn_string(uri) as pg_store:
        pg_store.setup()
        assert _run(pg_store, thread, 0, effects) == "ran"  # the statements are prepared
        restart("fast")  # between two calls: the server says why it closed
        with pytest.raises(psycopg.OperationalError, match="administrator command"):
            _in(where, lambda: _run(pg_store, thread, 1, effects))
    with PostgresStore.from_conn_string(uri) as pg_store:
        ctx = context(thread, 1)
        admission = _in(where, lambda: run_plan(pg_store, admit(ctx)))
        assert admission.kind == "run"  # claimed; the tool runs, then the server goes
        effects.append(f"{thread}/1")
        restart("immediate")
        done = finished_entry(admission.entry, "sent 1", None, "success")
        with pytest.raises(psycopg.OperationalError):
            _in(where, lambda: run_plan(pg_store, _outcome(ctx, done)))
        owners.REGISTRY.release(admission.entry.owner)  # its worker is gone
    with PostgresStore.from_conn_string(uri) as pg_store:
        assert _run(pg_store, thread, 0, effects) == "replayed"
        again = _in(where, lambda: run_plan(pg_store, admit(context(thread, 1))))
        assert again.kind != "run", again  # its outcome was lost: refused, never run twice
        assert _run(pg_store, thread, 2, effects) == "ran"
    assert effects == [f"{thread}/0", f"{thread}/1", f"{thread}/2"]


@pytest.mark.parametrize(
    ("query", "params"),
    [
        ("SELECT '%s' || %s::text", ["a", "b"]),  # a placeholder in a literal, as psycopg reads it
        ("SELECT '%s' || %s::text", ["a"]),  # one parameter short: psycopg's error
        ("SELECT %s::text || '$1'", ["a"]),
        ("SELECT %s::text, %s::text", ["%s", "$1"]),
    ],
)
def test_odd_statement_texts_answer_as_psycopgs_cursor_does(store, query, params):
    from psycopg.rows import tuple_row

    def on_cursor() -> Any:
        with store.conn.cursor(row_factory=tuple_row) as cur:
            return cur.execute(query, params).fetchall()

    def direct() -> Any:
        statement = getattr(store_cas, "_statement", None)  # c9cb1d9 had only the cursor
        return on_cursor() if statement is None else statement(store, store.conn, query, params)

    answers = []
    for run in (on_cursor, direct):
        try:
            answers.append(run())
        except Exception as exc:  # the same class and message on both paths
            answers.append((type(exc), str(exc)))
    assert answers[0] == answers[1]
