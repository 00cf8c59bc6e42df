"""Atomic compare-and-set of one store row, in the database that holds it.

LangGraph's `BaseStore` has no conditional write, so a claim written after a separate read
lets two workers both run a tool. Here each shipped store gets the database's own atomicity:
SQLite an immediate (write-locking) transaction, PostgreSQL a transaction holding an advisory
lock on the row, `InMemoryStore` a process lock. This module is the one place that reads the
stores' connection internals (`conn`, `lock`, `is_setup`), and a SQLite or PostgreSQL
checkpointer's (`conn`, `lock`) when it shares the store's connection (`share_connection`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import logging
import sqlite3
import threading
import warnings
import weakref
from collections.abc import (
    AsyncIterator,
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import orjson

from langgraph_replay_guard._compat import delegate_store
from langgraph_replay_guard.errors import ReplayGuardWarning
from langgraph_replay_guard.storage.plans import adrive, drive
from langgraph_replay_guard.storage.wake_names import channel, payload

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from langgraph_replay_guard.replay.ledger import Update

__all__ = [
    "PartlyWritten",
    "abatch_store",
    "aclaim_if_absent",
    "acompare_and_set",
    "acompare_and_set_many",
    "amark_waiting",
    "aprepare",
    "atomic_kind",
    "batch_store",
    "claim_if_absent",
    "claims_with_read",
    "compare_and_set",
    "compare_and_set_many",
    "is_sync_only",
    "listen_source",
    "mark_waiting",
    "prepare",
    "read_rows",
    "share_connection",
    "write_rows",
]

logger = logging.getLogger("langgraph_replay_guard")

T = TypeVar("T")

_locks: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()
_sync_only: weakref.WeakSet[Any] = weakref.WeakSet()
_ready: weakref.WeakSet[Any] = weakref.WeakSet()
_warned: set[str] = set()
# A SQLite store whose connection a checkpointer also uses -> that checkpointer's lock.
_shared: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
# A checkpointer -> the last store `share_connection` checked it against (the per-call fast path).
_checked: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

_SQLITE_SELECT = "SELECT value FROM store WHERE prefix = ? AND key = ?"
_SQLITE_UPSERT = (
    "INSERT INTO store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes) "
    "VALUES (?, ?, ?, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL) "
    "ON CONFLICT (prefix, key) DO UPDATE SET value = excluded.value, "
    "updated_at = CURRENT_TIMESTAMP, expires_at = NULL, ttl_minutes = NULL"
)
_PG_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_PG_ROW = "(%s, %s, %s, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL)"
_PG_COLUMNS = "(prefix, key, value, created_at, updated_at, expires_at, ttl_minutes)"
_PG_REFRESH = (
    "ON CONFLICT (prefix, key) DO UPDATE SET value = EXCLUDED.value, "
    "updated_at = CURRENT_TIMESTAMP, expires_at = NULL, ttl_minutes = NULL"
)
# A claim of a row that is not there, in one autocommit statement (one round trip, prepared):
# the row's advisory lock first, as the two-round-trip path takes it, then an insert that does
# nothing when the row exists (ON CONFLICT sees rows committed after the statement's snapshot,
# while it waited for the lock), then the lookup rows, written only with the claim. A path that
# read the row absent under the lock has committed before this insert runs; one that reads
# after it waits for this commit. Nothing inserted: the caller decides on the locked read.
_PG_CLAIM_NEW = (
    "WITH locked AS (SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))), "
    f"claimed AS (INSERT INTO store {_PG_COLUMNS} "
    "SELECT %s, %s, %s::jsonb, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL FROM locked "
    "ON CONFLICT (prefix, key) DO NOTHING RETURNING prefix, key), "
    f"also AS (INSERT INTO store {_PG_COLUMNS} "
    "SELECT a->>0, a->>1, a->2, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL "
    "FROM claimed, jsonb_array_elements(%s::jsonb) AS a "
    f"{_PG_REFRESH} RETURNING 1) "
    "SELECT prefix, key FROM claimed"
)
# The claims of a batch of calls (rows that are not there), in one statement: every row's
# advisory lock in key order (a JSON array of the lock names, sorted by the caller as the
# locked path sorts them: no deadlock between the two), then the claims (`[prefix, key,
# value]`, a JSON array), each inserted unless its row exists, then the lookup rows of the
# claims written (`[prefix, key, value, claim's prefix, claim's key]`, in key order).
_PG_CLAIM_NEW_MANY = (
    "WITH locked AS (SELECT count(pg_advisory_xact_lock(hashtextextended(l, 0))) AS n "
    "FROM jsonb_array_elements_text(%s::jsonb) AS l), "
    f"claimed AS (INSERT INTO store {_PG_COLUMNS} "
    "SELECT c->>0, c->>1, c->2, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL "
    "FROM locked, jsonb_array_elements(%s::jsonb) AS c "
    "ON CONFLICT (prefix, key) DO NOTHING RETURNING prefix, key), "
    f"also AS (INSERT INTO store {_PG_COLUMNS} "
    "SELECT a->>0, a->>1, a->2, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL "
    "FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS r(a, i) "
    "WHERE EXISTS (SELECT 1 FROM claimed WHERE claimed.prefix = a->>3 AND claimed.key = a->>4) "
    f"ORDER BY i {_PG_REFRESH} RETURNING 1) "
    "SELECT prefix, key FROM claimed"
)
# A first run's read and claim in one statement (`claim_if_absent`): the rows as a read
# finds them (the statement's snapshot, taken before it waits for the lock: as a read made
# just before the claim); when none is there, `_PG_CLAIM_NEW`'s lock, claim and lookup
# rows. A row that is there (a hit, a call in flight) takes no lock and writes nothing:
# the statement answers the rows found, or `true` once for the claim it wrote.
_PG_CLAIM_IF_ABSENT = (
    "WITH found AS ({reads}), "
    "locked AS (SELECT pg_advisory_xact_lock(hashtextextended(%s, 0)) "
    "WHERE NOT EXISTS (SELECT 1 FROM found)), "
    f"claimed AS (INSERT INTO store {_PG_COLUMNS} "
    "SELECT %s, %s, %s::jsonb, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL FROM locked "
    "ON CONFLICT (prefix, key) DO NOTHING RETURNING 1), "
    f"also AS (INSERT INTO store {_PG_COLUMNS} "
    "SELECT a->>0, a->>1, a->2, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL "
    "FROM claimed, jsonb_array_elements(%s::jsonb) AS a "
    f"{_PG_REFRESH} RETURNING 1) "
    "SELECT true, NULL::text, NULL::text, NULL::jsonb FROM claimed "
    "UNION ALL SELECT false, prefix, key, value FROM found"
)
WAITING = "waiting"
"""Key a waiting worker adds to a claim's value on PostgreSQL: its outcome must notify."""
# A waiter's mark on the row it waits for (autocommit, one round trip). True when the row is a
# claim still in flight that carries the mark now: marked here, or by an earlier waiter in a
# commit this statement sees (that mark came before the outcome's lock on the row, so the
# outcome notifies). False when the row is no longer in flight (an outcome, even one
# committed while this statement waited for the row): read it again, do not wait.
_PG_MARK = (
    "WITH marked AS (UPDATE store SET value = value || jsonb_build_object(%s::text, true) "
    "WHERE prefix = %s AND key = %s AND value->>'status' = 'started' "
    "AND NOT value ? %s RETURNING 1) "
    "SELECT EXISTS (SELECT 1 FROM marked) OR EXISTS (SELECT 1 FROM store WHERE prefix = %s "
    "AND key = %s AND value->>'status' = 'started' AND value ? %s) AS waiting"
)
_PG_ROW_LITERAL = "({}, {}, {}, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL)"
# A compare-and-set's rows. A new claim written over a claim that waiters marked (a takeover
# of a dead or expired holder's row) keeps the mark: those waiters sleep on the row, and only
# a marked row's outcome notifies (`_write_query`); without it they would sleep out their
# pause. The row's newest version is the one compared (a mark committed after the read).
_PG_UPSERT_MANY = (
    "INSERT INTO store (prefix, key, value, created_at, updated_at, expires_at, ttl_minutes) "
    "VALUES {values} "
    f"ON CONFLICT (prefix, key) DO UPDATE SET value = CASE WHEN store.value ? '{WAITING}' "
    "AND EXCLUDED.value->>'status' = 'started' "
    f"THEN EXCLUDED.value || jsonb_build_object('{WAITING}', true) ELSE EXCLUDED.value END, "
    "updated_at = CURRENT_TIMESTAMP, expires_at = NULL, ttl_minutes = NULL"
)
# A ledger row is never given a TTL (the upserts clear it); a user's TTL sweeper may still
# have marked one expired: read as the store's `get` would. One point lookup on the primary
# key per row (a list of pairs would be planned as a scan of the thread's whole prefix).
_PG_SELECT_ROW = "SELECT prefix, key, value FROM store WHERE prefix = %s AND key = %s"
_PG_READ_ONE = (
    "SELECT prefix, key, value FROM store WHERE prefix = %s AND key = %s "
    "AND (expires_at IS NULL OR expires_at > NOW())"
)
# Many rows (a ToolNode batch of hundreds of calls): the server plans each branch of a
# UNION ALL (1,000 took 0.27 s here; 10,000 exceed its stack depth, 32,768 psycopg's
# parameter limit), so one join of the pairs on the primary key instead (20 ms for 1,000).
_PG_READ_POINTS = 64
_PG_READ_MANY = (
    "SELECT s.prefix, s.key, s.value FROM unnest(%s::text[], %s::text[]) AS k(prefix, key) "
    "JOIN store s ON s.prefix = k.prefix AND s.key = k.key "
    "WHERE (s.expires_at IS NULL OR s.expires_at > NOW())"
)


class _Psycopg(NamedTuple):
    tuple_row: Any
    pool: Any
    async_pool: Any
    connection: Any
    cursor: Any
    transformer: Any
    error_from_result: Any
    operational_error: Any
    execute: Any
    cancel_wait: dict[str, float]


@functools.cache
def _psycopg() -> _Psycopg:
    """The psycopg names the per-call paths use, imported once (an optional dependency).

    A function-level `from ... import` costs a lookup in `sys.modules` each time it runs,
    and the PostgreSQL paths ran several a statement.
    """
    from psycopg import Connection, Cursor, OperationalError
    from psycopg.adapt import Transformer
    from psycopg.errors import error_from_result
    from psycopg.generators import execute
    from psycopg.rows import tuple_row
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    # psycopg 3.3's wait takes a time limit; 3.2's does not (its interrupted wait had none).
    waits = inspect.signature(Connection.wait).parameters
    return _Psycopg(
        tuple_row,
        ConnectionPool,
        AsyncConnectionPool,
        Connection,
        Cursor,
        Transformer,
        error_from_result,
        OperationalError,
        execute,
        {"timeout": 5.0} if "timeout" in waits else {},
    )


# A `PostgresStore` -> the cursor its guard statements reuse on its own connection.
_cursors: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _own_connection(store: Any, conn: Any) -> bool:
    """Whether `conn` is the store's own connection, not a pool's, and not in pipeline mode."""
    return conn is getattr(store, "conn", None) and getattr(store, "pipe", None) is None


class _Cursor:
    """A tuple-row cursor for one statement: on a store's own connection, the one kept for it.

    A new cursor costs psycopg about 13 us a statement (its adapters, its set-up and close),
    a tenth of a ledger hit. Only used holding the store's lock (`_pg_connection`), so one
    thread at a time. A new one is made when the connection or its `cursor_factory` changed
    (code that counts statements sets it), for a pool's connections and in pipeline mode.
    """

    __slots__ = ("cur", "kept")

    def __init__(self, store: Any, conn: Any) -> None:
        self.kept = _own_connection(store, conn)
        try:
            cur = _cursors.get(store) if self.kept else None
        except TypeError:  # an unhashable store (a subclass with `__eq__`): nothing kept
            self.kept, cur = False, None
        if (
            cur is None
            or cur.closed
            or cur.connection is not conn
            or type(cur) is not conn.cursor_factory
        ):
            cur = conn.cursor(row_factory=_psycopg().tuple_row)
        if self.kept:
            _cursors[store] = cur
        self.cur = cur

    def __enter__(self) -> Any:
        return self.cur

    def __exit__(self, *exc: object) -> None:
        if not self.kept:
            self.cur.close()


# libpq's codes (`psycopg.pq`), spelled here: importing the enums costs a lookup a statement.
_PQ_OK = 0  # ConnStatus.OK
_PQ_IDLE = 0  # TransactionStatus.IDLE
_PQ_ACTIVE = 1  # TransactionStatus.ACTIVE
_PQ_COMMAND_OK = 1  # ExecStatus.COMMAND_OK
_PQ_TUPLES_OK = 2  # ExecStatus.TUPLES_OK
_PQ_SQLSTATE = ord("C")  # DiagnosticField.SQLSTATE
_NO_SUCH_STATEMENT = b"26000"  # invalid_sql_statement_name: a DEALLOCATE or DISCARD ran


class _Prepared:
    """The guard's statements prepared on one connection, by name, and the loader of their rows.

    The connection's own `Transformer` decodes the rows (its `jsonb` loader, or one the user
    registered on the connection), as psycopg's cursor would.
    """

    __slots__ = ("made", "names", "tx")

    def __init__(self, conn: Any) -> None:
        self.names: dict[str, bytes] = {}
        self.made = 0  # names are never reused: one dropped alone must not clash with a new one
        self.tx = _psycopg().transformer(conn)


# A psycopg connection -> the guard's statements prepared on it (`_direct`).
_prepared: weakref.WeakKeyDictionary[Any, _Prepared] = weakref.WeakKeyDictionary()


def _direct(conn: Any, query: str, params: Sequence[Any], fetch: bool) -> list[Any] | None:
    """Run one guard statement through libpq itself, prepared once per connection by name.

    psycopg's cursor costs about 15 us of Python a statement in a tight loop (its query
    conversion, its prepared-statement bookkeeping, its wait loop), several times that
    between a call's other work; libpq's `PQexecPrepared` runs the statement in one C call
    that releases the GIL. Only for what that call can do as psycopg would: a sync
    connection in autocommit, idle, not in pipeline mode, with psycopg's default cursor (a
    `ClientCursor` connection asked for no server-side statements; so does
    `prepare_threshold=None`, for PgBouncer), in UTF-8, text parameters only. Otherwise
    None: the caller runs the statement on a cursor.

    Raises:
        psycopg.Error: The server's error, as psycopg's cursor raises it.
    """
    pg = _psycopg()
    if (
        not isinstance(conn, pg.connection)
        or conn.cursor_factory is not pg.cursor
        or not conn.autocommit
        or conn.prepare_threshold is None
        or not _default_str_dumper(conn)
    ):
        return None
    for param in params:
        # libpq reads a text parameter up to its first NUL: "a\x00b" would be sent as "a"
        # (another row's key); psycopg's cursor refuses it with a DataError naming the NUL.
        if type(param) is not str or "\x00" in param:
            return None
    numbered = _numbered(query)
    if numbered is None or numbered[1] != len(params):
        return None  # psycopg's cursor says what is wrong with it
    with conn.lock:
        pgconn = conn.pgconn
        if (
            pgconn.status != _PQ_OK
            or pgconn.transaction_status != _PQ_IDLE
            or pgconn.pipeline_status
            or pgconn.parameter_status(b"client_encoding") != b"UTF8"
        ):
            return None  # a closed or busy connection: the cursor path says why
        try:
            state = _prepared.get(conn)
        except TypeError:  # an unhashable connection subclass: nothing kept for it
            return None
        if state is None:
            state = _prepared[conn] = _Prepared(conn)
        values = [param.encode() for param in params]
        result = _direct_exec(conn, state, query, numbered[0], values)
        if (
            result.status not in (_PQ_TUPLES_OK, _PQ_COMMAND_OK)
            and result.error_field(_PQ_SQLSTATE) == _NO_SUCH_STATEMENT
        ):
            # Someone ran DEALLOCATE ALL or DISCARD ALL on the connection: prepare again.
            state.names.clear()
            result = _direct_exec(conn, state, query, numbered[0], values)
        if result.status not in (_PQ_TUPLES_OK, _PQ_COMMAND_OK):
            if pgconn.status != _PQ_OK and not result.error_field(_PQ_SQLSTATE):
                # The connection is lost with no server error to map. One the server sent
                # as it closed (`AdminShutdown` from pg_terminate_backend or a fast
                # shutdown) is psycopg's class for its SQLSTATE below, as on a cursor; but
                # `PQexecPrepared` (off the main thread) returns only its last result, "server
                # closed the connection": the connection's message still says why it closed.
                why = pgconn.error_message.decode("utf-8", "replace").strip()
                msg = f"consuming input failed: {why or result.get_error_message('utf-8')}"
                raise pg.operational_error(msg)
            raise pg.error_from_result(result, encoding="utf-8")
        if not fetch or result.status != _PQ_TUPLES_OK:
            return []
        tx = state.tx
        tx.set_pgresult(result)
        rows: list[Any] = tx.load_rows(0, result.ntuples, tuple)
        tx.set_pgresult(None)
        return rows


# psycopg's own dumper of a `str` parameter (`%s`: `PyFormat.AUTO`), from its C or its
# pure-Python implementation: the direct path encodes `str` as it does.
_STR_DUMPERS = {
    ("psycopg_binary._psycopg", "StrDumperUnknown"),
    ("psycopg_c._psycopg", "StrDumperUnknown"),
    ("psycopg.types.string", "StrDumperUnknown"),
}


def _default_str_dumper(conn: Any) -> bool:
    """Whether `conn` dumps a `str` parameter with psycopg's own dumper.

    A dumper the user registered (on the connection or on `psycopg.adapters`) applies to the
    store's own keys, which its cursor sends: the guard's statements must then use a cursor
    too, or the same key would be two rows (about 0.5 us a statement).
    """
    dumper = conn.adapters.get_dumper(str, "s")  # "s": `PyFormat.AUTO`, what `%s` asks for
    return (dumper.__module__, dumper.__name__) in _STR_DUMPERS


@functools.lru_cache(maxsize=256)
def _numbered(query: str) -> tuple[bytes, int] | None:
    """A guard statement's `%s` placeholders as `$1`, `$2`...; None if it has another `%`."""
    parts = query.split("%s")
    if any("%" in part for part in parts):
        return None
    text = "".join(f"{part}${i}" for i, part in enumerate(parts[:-1], 1)) + parts[-1]
    return text.encode(), len(parts) - 1


def _direct_exec(conn: Any, state: _Prepared, query: str, text: bytes, values: Any) -> Any:
    """`query` (`text` numbered) as a prepared statement, preparing it first on this connection.

    On the main thread it is sent with `PQsendQueryPrepared` and waited for by psycopg's
    `Connection.wait`, as the cursor does: a statement blocked on a row lock another
    transaction holds must still end on Ctrl-C (psycopg's wait cancels it on the server),
    and libpq's blocking `PQexecPrepared` would sit out the lock with the signal pending.
    Python runs signal handlers on the main thread only, so other threads (a ToolNode's
    parallel calls, a sync store's statements run off an event loop) keep the one C call.
    """
    pgconn = conn.pgconn
    interruptible = threading.current_thread() is threading.main_thread()  # not cached: fork
    name = state.names.get(query)
    if name is None:
        state.made += 1
        name = f"_rg_{state.made}".encode()
        # Parameters of unknown type, as psycopg sends `str`: the server infers each.
        if interruptible:
            prepared = _sent_and_waited(conn, lambda: pgconn.send_prepare(name, text))
        else:
            prepared = pgconn.prepare(name, text)
        if prepared.status != _PQ_COMMAND_OK:
            return prepared
        state.names[query] = name
    if interruptible:
        return _sent_and_waited(conn, lambda: pgconn.send_query_prepared(name, values))
    return pgconn.exec_prepared(name, values)


def _sent_and_waited(conn: Any, send: Callable[[], None]) -> Any:
    """Send a statement with `send` and wait for its last result as psycopg's cursor does.

    psycopg's `Connection.wait` cancels the statement on the server when Ctrl-C interrupts
    it. A Ctrl-C that lands after the send and before that wait starts (the process
    descheduled there while the statement already waits for a row lock) would leave the
    statement running and the connection busy ("another command is already in progress"):
    it is cancelled and its result read here as psycopg would, then the interrupt goes on.
    A cancel that fails or does not end the statement within 5 s (psycopg 3.3 and later:
    3.2's wait takes no time limit), or a second Ctrl-C during the cancel or before its
    result is read, closes the connection, as psycopg closes one it cannot cancel (the
    second goes on then).
    """
    pg, pgconn = _psycopg(), conn.pgconn
    try:
        send()
        return conn.wait(pg.execute(pgconn))[-1]
    except BaseException:
        if pgconn.transaction_status == _PQ_ACTIVE:
            try:
                conn.cancel_safe(timeout=5.0)
                conn.wait(pg.execute(pgconn), **pg.cancel_wait)
            except Exception:  # the interrupt goes on whatever happened here
                # QueryCanceled, as asked; a cancel that failed, or one the server did not act
                # on within psycopg's 5 s (a statement it had not read yet): closed below.
                pass
            finally:
                if pgconn.transaction_status == _PQ_ACTIVE:  # still busy: never left so
                    conn.close()
        raise


def _statement(
    store: Any, conn: Any, query: str, params: Sequence[Any], fetch: bool = True
) -> list[Any]:
    """One guard statement on a `PostgresStore`'s connection: its rows (`[]` unless `fetch`).

    On the store's own connection through libpq (`_direct`) when it can, else on a cursor.
    """
    if _own_connection(store, conn):
        rows = _direct(conn, query, params, fetch)
        if rows is not None:
            return rows
    with _Cursor(store, conn) as cur:
        cur.execute(query, params)
        if not fetch:
            return []
        found: list[Any] = cur.fetchall()
        return found


def _unwrap(store: Any) -> Any:
    """The store a wrapper delegates to (`langgraph dev`'s batching store, see `_compat`)."""
    seen = 0
    while seen < 8 and _kind_of(store) == "unknown":
        inner = delegate_store(store)
        if inner is None:
            break
        store, seen = inner, seen + 1
    return store


def _kind(store: Any) -> str:
    """Which atomic strategy a store (or the store it wraps) gets."""
    return _kind_of(_unwrap(store))


# Which atomic strategy a store (or which lock a checkpointer) gets, by class name along the MRO
# so subclasses keep theirs and the backends stay optional imports.
_STORE_KINDS = (
    ("langgraph.store.sqlite.aio.AsyncSqliteStore", "async_sqlite"),
    ("langgraph.store.sqlite.base.SqliteStore", "sqlite"),
    ("langgraph.store.postgres.aio.AsyncPostgresStore", "async_postgres"),
    ("langgraph.store.postgres.base.PostgresStore", "postgres"),
    ("langgraph.store.memory.InMemoryStore", "memory"),
)
_SAVER_KINDS = (
    ("langgraph.checkpoint.sqlite.aio.AsyncSqliteSaver", "async_sqlite"),
    ("langgraph.checkpoint.sqlite.SqliteSaver", "sqlite"),
    ("langgraph.checkpoint.postgres.aio.AsyncPostgresSaver", "async_postgres"),
    ("langgraph.checkpoint.postgres.PostgresSaver", "postgres"),
    ("langgraph.checkpoint.postgres.shallow.AsyncShallowPostgresSaver", "async_postgres"),
    ("langgraph.checkpoint.postgres.shallow.ShallowPostgresSaver", "postgres"),
)


def _class_kind(obj: Any, kinds: tuple[tuple[str, str], ...], default: str) -> str:
    of: Any = type(obj)
    return _type_kind(of, kinds, default)


@functools.lru_cache(maxsize=256)
def _type_kind(of: Any, kinds: tuple[tuple[str, str], ...], default: str) -> str:
    # Cached by class: every plan op asks (the PostgreSQL paths are chosen per op).
    names = {cls.__module__ + "." + cls.__name__ for cls in of.__mro__}
    return next((kind for name, kind in kinds if name in names), default)


def _kind_of(store: Any) -> str:
    """Which atomic strategy a store gets (by class, so subclasses keep theirs)."""
    return _class_kind(store, _STORE_KINDS, "unknown")


def _saver_kind(saver: Any) -> str:
    return _class_kind(saver, _SAVER_KINDS, "other")


# Stores whose connection a checkpointer of the same kind may share (`share_connection`).
_SHARED_KINDS = ("sqlite", "async_sqlite", "postgres", "async_postgres")


def share_connection(store: BaseStore, checkpointer: Any) -> None:
    """Serialize the guard's use of a store with a checkpointer on the same connection.

    `SqliteSaver(conn)` and `SqliteStore(conn)` each lock the connection with a lock of their
    own, and each ends its statements with a `COMMIT`: the saver's commit, run while a guard
    claim's `BEGIN IMMEDIATE` is open, ends the claim's transaction halfway (then `cannot
    commit - no transaction is active`, or a claim no longer atomic). When the running
    graph's checkpointer shares the store's connection, the guard's store operations hold the
    checkpointer's lock too (taken first; the checkpointer never takes the store's). Cheap
    after the first call with the same pair. `PostgresSaver(conn)` and `PostgresStore(conn)`
    likewise: the saver's writes put the connection in pipeline mode under its own lock, and
    a guard statement sent meanwhile went into that pipeline (a claim's statements failed,
    `cannot insert multiple commands into a prepared statement`, and left the connection
    broken for the graph too).

    Args:
        store: The guard's ledger store.
        checkpointer: The running graph's checkpointer, or None.
    """
    if checkpointer is None:
        return
    try:
        if _checked.get(checkpointer) is store:
            return
    except TypeError:  # an unhashable checkpointer: nothing we know shares a connection
        return
    inner = _unwrap(store)
    kind = _kind_of(inner)
    if kind in _SHARED_KINDS and _saver_kind(checkpointer) == kind:
        conn = getattr(checkpointer, "conn", None)
        lock = getattr(checkpointer, "lock", None)
        if conn is not None and conn is getattr(inner, "conn", None) and lock is not None:
            with contextlib.suppress(TypeError):  # an unhashable store: nothing kept for it
                _shared[inner] = lock
    with contextlib.suppress(TypeError):
        _checked[checkpointer] = store


def _shared_lock(store: Any, method: str) -> Any:
    """The lock of a checkpointer on this store's connection, else a no-op context.

    `method` is `__enter__` (sync) or `__aenter__` (async): a sync call on an async store's
    connection (no sync lock to take) gets the no-op; that path has no claims to protect.
    """
    try:
        lock = _shared.get(store)
    except TypeError:
        lock = None
    return lock if hasattr(lock, method) else contextlib.nullcontext()


def _outer_lock(store: Any) -> Any:
    return _shared_lock(store, "__enter__")


def _aouter_lock(store: Any) -> Any:
    return _shared_lock(store, "__aenter__")


def batch_store(store: BaseStore, ops: Iterable[Any]) -> list[Any]:
    """`store.batch(ops)`, holding a checkpointer's lock when it shares the connection."""
    with _outer_lock(_unwrap(store)):
        return store.batch(ops)


async def abatch_store(store: BaseStore, ops: Iterable[Any]) -> list[Any]:
    """`store.abatch(ops)`, holding a checkpointer's lock when it shares the connection."""
    async with _aouter_lock(_unwrap(store)):
        return await store.abatch(ops)


def atomic_kind(store: BaseStore) -> str:
    """How claims are made atomic on this store: `sqlite`, `postgres`, `memory`...

    `unknown` means a process lock only: not safe for several worker processes.
    """
    return _kind(store)


def is_sync_only(store: BaseStore) -> bool:
    """Whether the store's async API is known to be missing (a sync SqliteStore)."""
    return store in _sync_only


def mark_sync_only(store: BaseStore) -> None:
    """Remember that the store has no async API."""
    _sync_only.add(store)


def _is_ready(store: Any) -> bool:
    try:
        return store in _ready
    except TypeError:  # an unhashable store: check it every time
        return False


def _mark_ready(store: Any) -> None:
    with contextlib.suppress(TypeError):
        _ready.add(store)


def _implicit_transactions(conn: Any) -> bool:
    """Whether Python's sqlite3 begins transactions on this connection by itself.

    True in its default (legacy) mode, `isolation_level` not None: an `INSERT` outside an
    explicit transaction opens one that stays open until `commit()`. Such a transaction,
    found open while the store's lock is held, is not one of the store's own (those are
    explicit and end before the lock is released): it is a statement's leftover.
    """
    autocommit = getattr(conn, "autocommit", None)  # Python 3.12+
    if autocommit is not None and autocommit != getattr(sqlite3, "LEGACY_TRANSACTION_CONTROL", -1):
        return False
    return conn.isolation_level is not None


def _end_leftover(conn: Any) -> None:
    """Commit a transaction Python's sqlite3 began by itself (call with the store's lock)."""
    if conn.in_transaction and _implicit_transactions(conn):
        conn.commit()


async def _aend_leftover(conn: Any) -> None:
    if conn.in_transaction and _implicit_transactions(conn):
        await conn.commit()


def prepare(store: BaseStore) -> None:
    """Make a store ready for the guard's reads and writes (once per store; then free).

    A `SqliteStore` is set up, and a transaction its `setup()` left open on a connection in
    Python's default transaction mode is committed, so `SqliteStore(sqlite3.connect(path,
    check_same_thread=False))` works as well as an autocommit connection. Other stores need
    nothing. An async-only store is prepared by `aprepare`.
    """
    if _is_ready(store):
        return
    inner = _unwrap(store)
    kind = _kind_of(inner)
    if kind == "sqlite":
        with _outer_lock(inner):
            if not inner.is_setup:
                inner.setup()
            with inner.lock:
                _end_leftover(inner.conn)
    elif kind == "async_sqlite":
        return  # sync code cannot prepare it; its async paths do
    _mark_ready(store)


async def aprepare(store: BaseStore) -> None:
    """Async `prepare`: an `AsyncSqliteStore` on its own connection, a sync one off the loop."""
    if _is_ready(store):
        return
    inner = _unwrap(store)
    kind = _kind_of(inner)
    if kind == "sqlite":
        await asyncio.to_thread(prepare, store)
        return
    if kind == "async_sqlite":
        async with _aouter_lock(inner):
            if not inner.is_setup:
                await inner.setup()
            async with inner.lock:
                await _aend_leftover(inner.conn)
    _mark_ready(store)


def _lock_for(store: Any) -> threading.Lock:
    with _locks_guard:
        lock = _locks.get(store)
        if lock is None:
            lock = _locks[store] = threading.Lock()
        return lock


def _matches(current: Any, op: Update) -> bool:
    if current is None:
        return not op.expect_exists
    if not op.expect_exists:
        return False
    rev = current.get("rev") if isinstance(current, Mapping) else None
    return rev == op.expect_rev


def _decide(current: Any, op: Update) -> tuple[bool, Any]:
    if _matches(current, op):
        return True, op.value
    return False, current


def _text(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace)


def _rows(op: Update) -> list[tuple[str, str, dict[str, Any]]]:
    """`(prefix, key, value)` of every row a successful compare-and-set writes."""
    rows = [(_text(ns), key, value) for ns, key, value in op.also]
    rows.append((_text(op.namespace), op.key, op.value))
    return rows


def _loads(raw: Any) -> Any:
    if raw is None:
        return None
    if isinstance(raw, memoryview):
        raw = raw.tobytes()
    if isinstance(raw, bytes | bytearray | str):
        return orjson.loads(raw)
    return raw  # psycopg already decoded jsonb


_NULL_ROW = "<a JSON null>"
"""What a PostgreSQL row holding JSON `null` reads as: a damaged row, not an absent one."""


def _pg_loaded(raw: Any) -> Any:
    """The value of a PostgreSQL row that exists, as psycopg decoded its `jsonb`.

    A `str` is the row's own JSON string and `None` its JSON `null`: a damaged row (the
    ledger reads its outcome as unknown), never parsed again (a JSON string could not be
    parsed: the read raised) nor taken for an absent row (the call ran again).
    """
    if raw is None:
        return _NULL_ROW
    if isinstance(raw, memoryview | bytes | bytearray):
        return _loads(raw)
    return raw


def _warn_not_atomic(store: Any) -> None:
    name = type(store).__name__
    if name in _warned:
        return
    _warned.add(name)
    warnings.warn(
        f"langgraph-replay-guard: the store {name} has no atomic conditional write the guard "
        "knows; claims use a lock in this process only, so two worker processes resuming one "
        "thread at once could both run a tool. Use SqliteStore or PostgresStore for several "
        "workers.",
        ReplayGuardWarning,
        stacklevel=4,
    )


# -- sync -----------------------------------------------------------------------------------------


def compare_and_set(store: BaseStore, op: Update) -> tuple[bool, Any]:
    """Write `op.value` if the row is as `op` expects, atomically; return `(written, now)`.

    Raises:
        Exception: The database's own errors (a closed connection, a locked file).
    """
    store = _unwrap(store)
    kind = _kind_of(store)
    if kind == "sqlite":
        return _sqlite_cas(store, op)
    if kind == "postgres":
        return _postgres_cas(store, op)
    if kind in ("async_sqlite", "async_postgres"):
        msg = (
            f"{type(store).__name__} is async-only: run the graph with ainvoke/astream "
            "(or give the guard a sync store for sync runs)."
        )
        raise TypeError(msg)
    if kind == "unknown":
        _warn_not_atomic(store)
    with _lock_for(store):
        item = store.get(op.namespace, op.key)
        written, current = _decide(None if item is None else item.value, op)
        if written:
            for namespace, key, value in op.also:
                store.put(namespace, key, value, index=False)
            store.put(op.namespace, op.key, op.value, index=False)
        return written, current


def _sqlite_cas(store: Any, op: Update) -> tuple[bool, Any]:
    prepare(store)
    conn = store.conn
    prefix = _text(op.namespace)
    with _outer_lock(store), store.lock:
        # A transaction Python's sqlite3 began by itself (default isolation level) would make
        # BEGIN fail: end it. Ours starts after it, so the claim stays atomic.
        _end_leftover(conn)
        # IMMEDIATE takes SQLite's write lock first: no other connection, in this process or
        # another, can read-then-write this row between our read and our write.
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(_SQLITE_SELECT, (prefix, op.key)).fetchone()
            written, current = _decide(_loads(row[0]) if row else None, op)
            if written:
                for text, key, value in _rows(op):
                    conn.execute(_SQLITE_UPSERT, (text, key, orjson.dumps(value)))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return written, current


def compare_and_set_many(store: BaseStore, ops: list[Update]) -> list[tuple[bool, Any]]:
    """`compare_and_set` of several rows in one transaction: one answer per op, in order.

    The claims of a batch of parallel calls (`storage.batch_claims`): on PostgreSQL one
    statement when every op claims a row that is not there (`_PG_CLAIM_NEW_MANY`), else two
    round trips and one commit for all of them; on SQLite one immediate transaction. Each op
    is decided as if run alone in this order (a later op sees an earlier one's writes).
    Other stores run the ops one by one.

    Raises:
        PartlyWritten: On PostgreSQL, the one statement's claims were committed and the
            other ops' transaction failed (none of those was written).
        Exception: The database's own errors (then no op was written).
    """
    inner = _unwrap(store)
    kind = _kind_of(inner)
    if len(ops) == 1 or kind not in ("sqlite", "postgres"):
        return [compare_and_set(store, op) for op in ops]
    if kind == "sqlite":
        return _sqlite_cas_many(inner, ops)
    return _pg_run(inner, functools.partial(_cas_plan, ops))


class PartlyWritten(Exception):
    """`compare_and_set_many` wrote some ops, then failed on the others (their transaction).

    On PostgreSQL the claims of rows that are not there are one statement, committed; the
    ops it did not write (their row was there) take a second transaction. When that one
    fails, `answers` holds the committed ops' answers (by index) and `error` what the
    others get: none of them was written.
    """

    def __init__(self, answers: Mapping[int, tuple[bool, Any]], error: Exception) -> None:
        """Note the answers of the ops written and the others' error."""
        super().__init__(f"{len(answers)} ops written, the others failed: {error!r}")
        self.answers = dict(answers)
        self.error = error


def sorted_rows(writes: Mapping[tuple[str, str], Any]) -> list[tuple[str, str, Any]]:
    """Rows to upsert, in key order: two transactions upserting the same rows never deadlock."""
    return [(text, key, writes[(text, key)]) for text, key in sorted(writes)]


def _decide_many(
    current: dict[tuple[str, str], Any], ops: list[Update]
) -> tuple[list[tuple[bool, Any]], dict[tuple[str, str], Any]]:
    """Decide each op in order over the rows read; the answers and the rows to write."""
    answers: list[tuple[bool, Any]] = []
    writes: dict[tuple[str, str], Any] = {}
    for op in ops:
        answer = _decide(current.get((_text(op.namespace), op.key)), op)
        if answer[0]:
            for text, key, value in _rows(op):
                current[(text, key)] = writes[(text, key)] = value
        answers.append(answer)
    return answers, writes


def _sqlite_cas_many(store: Any, ops: list[Update]) -> list[tuple[bool, Any]]:
    prepare(store)
    conn = store.conn
    with _outer_lock(store), store.lock:
        _end_leftover(conn)
        conn.execute("BEGIN IMMEDIATE")  # as `_sqlite_cas`: one write lock, one commit for all
        try:
            current: dict[tuple[str, str], Any] = {}
            for op in ops:
                pair = (_text(op.namespace), op.key)
                row = conn.execute(_SQLITE_SELECT, pair).fetchone()
                current.setdefault(pair, _loads(row[0]) if row else None)
            answers, writes = _decide_many(current, ops)
            for text, key, value in sorted_rows(writes):
                conn.execute(_SQLITE_UPSERT, (text, key, orjson.dumps(value)))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return answers


# -- PostgreSQL: each compare-and-set is a plan of statements, run by a sync or an async driver --


@dataclasses.dataclass(frozen=True)
class _Sql:
    """One round trip to PostgreSQL: a statement (or a simple query of several), its parameters.

    The plan receives the rows of the last result (`fetch`), else an empty list. `prepare`
    False sends a simple query (several statements, values as literals, no parameters).
    """

    query: Any
    params: Any = None
    prepare: bool | None = None
    fetch: bool = True


_SqlPlan = Generator[_Sql, list[tuple[Any, ...]], T]


def _simple(store: Any, conn: Any) -> bool:
    """Whether a plan may spread one transaction over simple queries: an autocommit connection.

    Not in pipeline mode (`PostgresStore(pipeline=True)`): it has no simple queries. Other
    connections run a plan inside `conn.transaction()`.
    """
    return bool(conn.autocommit) and getattr(store, "pipe", None) is None


def _cas_plan(ops: list[Update], simple: bool) -> _SqlPlan[list[tuple[bool, Any]]]:
    """The compare-and-set of `ops`, each decided as if alone in this order (one transaction).

    On an autocommit connection (`simple`) claims of rows that are not there are written in
    one statement first (`_claim_new_sql`); the ops it did not write (their row exists) take
    the locked read-then-write: the locks and reads in one simple query, the writes and
    `COMMIT` in another. Otherwise the driver has opened the transaction.
    """
    answers: dict[int, tuple[bool, Any]] = {}
    claim = _claim_new_sql(ops) if simple else None
    if claim is not None:
        claimed = {(row[0], row[1]) for row in (yield claim)}
        for i, op in enumerate(ops):
            if (_text(op.namespace), op.key) in claimed:
                answers[i] = (True, op.value)
    rest = [op for i, op in enumerate(ops) if i not in answers]
    try:
        decided = iter((yield from _locked_cas_plan(rest, simple)) if rest else [])
    except Exception as exc:
        if not answers:
            raise
        # The one statement's claims are committed: they are answered as written (their
        # calls run), the error goes only to the ops of the transaction rolled back.
        raise PartlyWritten(answers, exc) from exc
    return [answers[i] if i in answers else next(decided) for i in range(len(ops))]


def _locked_cas_plan(ops: list[Update], simple: bool) -> _SqlPlan[list[tuple[bool, Any]]]:
    """Lock the rows, read them, decide each op in order, write what was decided.

    The advisory locks go in key order: no deadlock with another batch's claim.

    `simple`: `BEGIN`, the locks and the reads go in one simple query (each read runs after
    its lock is granted, with a snapshot of its own), the writes and `COMMIT` in another,
    values quoted by psycopg as literals.
    """
    from psycopg import sql

    wanted = sorted({(_text(op.namespace), op.key) for op in ops})
    locks = sorted({f"{text}/{key}" for text, key in wanted})
    if simple:
        parts: list[sql.Composable] = [sql.SQL("BEGIN")]
        parts += [sql.SQL(_PG_LOCK.replace("%s", "{}")).format(sql.Literal(lock)) for lock in locks]
        parts.append(
            sql.SQL(" UNION ALL ").join(
                sql.SQL(_PG_SELECT_ROW.replace("%s", "{}")).format(
                    sql.Literal(text), sql.Literal(key)
                )
                for text, key in wanted
            )
        )
        rows = yield _Sql(sql.SQL("; ").join(parts), prepare=False)
    else:
        for lock in locks:
            yield _Sql(_PG_LOCK, (lock,), fetch=False)
        rows = yield _Sql(*_read_query(wanted, plain=True))
    found = _read_answer(wanted, rows)
    answers, writes = _decide_many(dict(zip(wanted, found, strict=True)), ops)
    if simple:
        yield _Sql(_pg_commit(sorted_rows(writes)), prepare=False, fetch=False)
    elif writes:
        yield _Sql(*_upsert(sorted_rows(writes)), fetch=False)
    return answers


def _claims_new_row(op: Update) -> bool:
    """Whether `op` is a claim of an absent row that one statement can write (`_PG_CLAIM_NEW`).

    Its other rows must be other keys, once each: one statement cannot write a row twice.
    """
    if op.expect_exists:
        return False
    keys = [(op.namespace, op.key), *((ns, key) for ns, key, _ in op.also)]
    return len(set(keys)) == len(keys)


def _json(value: Any) -> str:
    """A value as JSON text for a `::jsonb` parameter.

    orjson, as the SQLite paths write: psycopg's `Jsonb` runs the standard library's
    encoder, several times the cost for a ledger row, on every claim and outcome.
    """
    return orjson.dumps(value).decode()


def _claim_new_sql(ops: list[Update]) -> _Sql | None:
    """One prepared statement claiming the rows of `ops` that are not there, or None.

    None unless every op claims an absent row and no two ops write the same row (a batch's
    lookup rows shared by two of its calls: one statement cannot write a row twice, and
    which value wins follows the ops' order, which the locked path keeps). The statement
    answers the `(prefix, key)` of each claim it wrote.
    """
    if not all(_claims_new_row(op) for op in ops):
        return None
    if len(ops) == 1:
        (op,) = ops
        prefix = _text(op.namespace)
        # The other rows as one JSON array of `[prefix, key, value]`: psycopg quotes text
        # arrays with a regular expression per element, a JSON document is passed as it is.
        one = _json([[_text(ns), key, value] for ns, key, value in op.also])
        return _Sql(_PG_CLAIM_NEW, (f"{prefix}/{op.key}", prefix, op.key, _json(op.value), one))
    keys = [(_text(ns), key) for op in ops for ns, key in _op_keys(op)]
    if len(set(keys)) != len(keys):
        return None
    claims = [(_text(op.namespace), op.key, op.value) for op in ops]
    # Lookup rows in key order (as `sorted_rows`): two statements upserting the same lookup
    # rows take their row locks in one order, never a deadlock.
    also: list[list[Any]] = sorted(
        (
            [_text(ns), key, value, _text(op.namespace), op.key]
            for op in ops
            for ns, key, value in op.also
        ),
        key=lambda row: (row[0], row[1]),
    )
    locks = sorted(f"{text}/{key}" for text, key, _ in claims)
    params = (_json(locks), _json([list(claim) for claim in claims]), _json(also))
    return _Sql(_PG_CLAIM_NEW_MANY, params)


def _op_keys(op: Update) -> list[tuple[tuple[str, ...], str]]:
    return [(op.namespace, op.key), *((ns, key) for ns, key, _ in op.also)]


def _claim_if_absent_plan(
    keys: list[tuple[str, str]], op: Update, simple: bool
) -> _SqlPlan[tuple[bool, list[Any]]]:
    """Read `keys` and, when none is there, write the claim `op` (of `keys[0]`): one statement.

    `simple` is not needed: the statement is its own transaction, or the driver's.
    """
    del simple
    prefix = _text(op.namespace)
    also = _json([[_text(ns), key, value] for ns, key, value in op.also])
    params = [part for pair in keys for part in pair]
    params += [f"{prefix}/{op.key}", prefix, op.key, _json(op.value), also]
    rows = yield _Sql(_claim_if_absent_text(len(keys)), params)
    if any(row[0] for row in rows):
        return True, [None] * len(keys)
    return False, _read_answer(keys, [row[1:] for row in rows])


@functools.lru_cache(maxsize=8)
def _claim_if_absent_text(count: int) -> str:
    return _PG_CLAIM_IF_ABSENT.format(reads=_points_text(count))


def _pg_exec(store: Any, conn: Any, stmt: _Sql) -> list[tuple[Any, ...]]:
    """Run one statement of a plan on a sync connection: its last result's rows."""
    if stmt.prepare is None and isinstance(stmt.query, str):
        return _statement(store, conn, stmt.query, stmt.params or (), stmt.fetch)
    with _Cursor(store, conn) as cur:
        cur.execute(stmt.query, stmt.params, prepare=stmt.prepare)
        if not stmt.fetch:
            return []
        while cur.nextset():
            pass  # to the last statement's result
        rows: list[tuple[Any, ...]] = cur.fetchall()
        return rows


async def _apg_exec(conn: Any, stmt: _Sql) -> list[tuple[Any, ...]]:
    """`_pg_exec` on an async connection."""
    async with conn.cursor(row_factory=_psycopg().tuple_row) as cur:
        await cur.execute(stmt.query, stmt.params, prepare=stmt.prepare)
        if not stmt.fetch:
            return []
        while cur.nextset():
            pass
        rows: list[tuple[Any, ...]] = await cur.fetchall()
        return rows


def _pg_run(store: Any, make: Callable[[bool], _SqlPlan[T]]) -> T:
    """Run the plan `make(simple)` on a `PostgresStore`'s connection (or one of its pool's).

    On an autocommit connection the plan's simple queries hold its transaction, rolled back
    if anything raises; on other connections the plan runs in `conn.transaction()`.
    """
    with _pg_connection(store, _psycopg().pool) as conn:
        run = functools.partial(_pg_exec, store, conn)
        if _simple(store, conn):
            with _pg_rolled_back(conn):
                return drive(make(True), run)
        with conn.transaction():
            return drive(make(False), run)


async def _apg_run(store: Any, make: Callable[[bool], _SqlPlan[T]]) -> T:
    """`_pg_run` on an `AsyncPostgresStore`'s connection (or one of its pool's)."""
    async with _apg_connection(store, _psycopg().async_pool) as conn:
        run = functools.partial(_apg_exec, conn)
        if _simple(store, conn):
            async with _apg_rolled_back(conn):
                return await adrive(make(True), run)
        async with conn.transaction():
            return await adrive(make(False), run)


def claims_with_read(store: BaseStore) -> bool:
    """Whether `claim_if_absent` claims on this store in one statement (PostgreSQL, as given)."""
    return _kind_of(store) in ("postgres", "async_postgres")


def claim_if_absent(
    store: BaseStore, keys: Sequence[tuple[tuple[str, ...], str]], op: Update
) -> tuple[bool, list[Any]] | None:
    """Read rows and claim the first when none is there, in one round trip on PostgreSQL.

    A first run's read and claim in one statement (`_PG_CLAIM_IF_ABSENT`): the rows are
    read as `read_rows` reads them; when none is there, the claim `op` (the row of
    `keys[0]`, expected absent) is written as `compare_and_set` writes it (the row's
    advisory lock, then an insert that does nothing when the row exists).

    Returns:
        `(True, [None, ...])` when the claim was written; `(False, values)` with the rows'
        values (None where absent) when it was not (a row is there, or the claimed row
        was written by another worker while this statement waited for its lock: read as
        absent, the plan's compare-and-set finds it); None for other stores and claims
        one statement cannot write (the caller reads, then compare-and-sets).

    Raises:
        Exception: The database's own errors (then nothing was written).
    """
    inner = store  # as `read_rows`: the store given (a wrapping store's reads go through it)
    if _kind_of(inner) != "postgres" or not _claims_new_row(op):
        return None
    wanted = [(_text(ns), key) for ns, key in keys]
    answer = _pg_run(inner, functools.partial(_claim_if_absent_plan, wanted, op))
    _end_pipelined(inner)
    return answer


async def aclaim_if_absent(
    store: BaseStore, keys: Sequence[tuple[tuple[str, ...], str]], op: Update
) -> tuple[bool, list[Any]] | None:
    """Async `claim_if_absent` (`AsyncPostgresStore`'s own connection; a sync one off the loop)."""
    inner = store
    kind = _kind_of(inner)
    if kind == "postgres":
        return await asyncio.to_thread(claim_if_absent, inner, keys, op)
    if kind != "async_postgres" or not _claims_new_row(op):
        return None
    wanted = [(_text(ns), key) for ns, key in keys]
    answer = await _apg_run(inner, functools.partial(_claim_if_absent_plan, wanted, op))
    await _aend_pipelined(inner)
    return answer


def _postgres_cas(store: Any, op: Update) -> tuple[bool, Any]:
    return _pg_run(store, functools.partial(_cas_plan, [op]))[0]


@contextlib.asynccontextmanager
async def _apg_rolled_back(conn: Any) -> AsyncIterator[None]:
    """`_pg_rolled_back` on an async connection."""
    try:
        yield
    except BaseException:
        from psycopg.pq import TransactionStatus

        if conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(Exception):
                await conn.execute("ROLLBACK")
        raise


@contextlib.contextmanager
def _pg_rolled_back(conn: Any) -> Iterator[None]:
    """Roll back the transaction a simple query left open when anything in the block raises."""
    try:
        yield
    except BaseException:
        from psycopg.pq import TransactionStatus

        if conn.info.transaction_status != TransactionStatus.IDLE:
            with contextlib.suppress(Exception):
                conn.execute("ROLLBACK")
        raise


def _pg_commit(rows: Iterable[tuple[str, str, Any]]) -> Any:
    """`COMMIT`, after one upsert of `rows` (values quoted as literals) when there are any."""
    from psycopg import sql
    from psycopg.types.json import Jsonb

    values = [
        sql.SQL(_PG_ROW_LITERAL).format(sql.Literal(text), sql.Literal(key), sql.Literal(Jsonb(v)))
        for text, key, v in rows
    ]
    if not values:
        return sql.SQL("COMMIT")
    upsert = sql.SQL(_PG_UPSERT_MANY).format(values=sql.SQL(", ").join(values))
    return sql.SQL("{}; COMMIT").format(upsert)


def _upsert(rows: Iterable[tuple[str, str, Any]]) -> tuple[str, list[Any]]:
    """One statement putting every row (the last value of a key repeated wins).

    One statement, not one per row: each statement is a round trip to the server.
    """
    from psycopg.types.json import Jsonb

    unique = {(text, key): value for text, key, value in rows}
    values = ", ".join([_PG_ROW] * len(unique))
    params = [part for (text, key), value in unique.items() for part in (text, key, Jsonb(value))]
    return _PG_UPSERT_MANY.format(values=values), params


def _write_query(puts: list[tuple[tuple[str, ...], str, Any]]) -> tuple[str, list[Any]]:
    """The rows' upsert, notifying the rows a waiter marked: one statement, one transaction.

    Each row is locked first (`FOR UPDATE`, before the upsert: its input waits for the
    locks), which reads its newest version even when a waiter's mark (`_PG_MARK`) committed
    after this statement's snapshot; a row carrying the mark gets its `pg_notify`. A row
    without one has nobody waiting (a waiter marks it before it waits), and a notification
    costs every committing transaction that sends one a turn on the server's one
    notification lock. The text depends only on the number of rows (prepared once each).
    """
    unique = {(_text(ns), key): (ns, key, value) for ns, key, value in puts}
    query = _write_text(len(unique))
    params: list[Any] = []
    for (text, key), (_ns, _key, value) in unique.items():
        params += (text, key, _json(value))
    params.append(WAITING)
    for text, key in unique:
        params += (text, key)
    for (text, key), (ns, _key, _value) in unique.items():
        params += (text, key, channel(ns), payload(ns, key))
    return query, params


@functools.lru_cache(maxsize=64)
def _write_text(count: int) -> str:
    """`_write_query`'s text for `count` rows (built once per count, not per outcome)."""
    values = ", ".join(["(%s, %s, %s::jsonb)"] * count)
    points = " OR ".join(["(prefix = %s AND key = %s)"] * count)
    named = ", ".join(["(%s, %s, %s, %s)"] * count)
    query = (
        f"WITH put (prefix, key, value) AS (VALUES {values}), "
        "waited AS MATERIALIZED (SELECT prefix, key, value ? %s AS waiting FROM store "
        f"WHERE {points} FOR UPDATE), "
        f"written AS (INSERT INTO store {_PG_COLUMNS} "
        "SELECT prefix, key, value, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, NULL, NULL FROM put "
        f"WHERE (SELECT count(*) FROM waited) >= 0 {_PG_REFRESH} RETURNING 1) "
        "SELECT pg_notify(n.channel, n.payload) FROM waited w "
        f"JOIN (VALUES {named}) AS n(prefix, key, channel, payload) "
        "ON w.prefix = n.prefix AND w.key = n.key WHERE w.waiting"
    )
    return query


def _mark_params(namespace: tuple[str, ...], key: str) -> tuple[str, ...]:
    prefix = _text(namespace)
    return (WAITING, prefix, key, WAITING, prefix, key, WAITING)


def _pg_connection(store: Any, pool_type: Any) -> Any:
    """The store's connection (holding its lock), or one from its pool, as a context.

    A checkpointer's lock comes first when it shares the connection (`share_connection`).
    """
    if isinstance(store.conn, pool_type):
        return store.conn.connection()
    return _locked(store.lock, store.conn, _outer_lock(store))


def _leftover(conn: Any) -> str | None:
    """How to end a transaction psycopg began by itself on a non-autocommit connection.

    Such a connection opens a transaction at its first statement and keeps it open until
    `commit()` (the store's own `batch` never commits it). A claim's or an outcome's
    `conn.transaction()` inside it is only a savepoint: never committed, invisible to the
    other workers, its advisory lock held until the connection closes. So, holding the
    store's lock, a leftover is committed ("COMMIT", as SQLite's `_end_leftover`), a failed
    one rolled back ("ROLLBACK"), before and after each of the guard's statements. Only
    asked of a connection not in autocommit (`_locked` and `_alocked` skip those).
    """
    from psycopg.pq import PipelineStatus, TransactionStatus

    if conn.closed or conn.info.pipeline_status != PipelineStatus.OFF:
        return None

    status = conn.info.transaction_status
    if status == TransactionStatus.INTRANS:
        return "COMMIT"
    return "ROLLBACK" if status == TransactionStatus.INERROR else None


def _ended(conn: Any) -> Any:
    """The call that ends `conn`'s leftover transaction (`_leftover`), or None."""
    end = _leftover(conn)
    return None if end is None else conn.commit if end == "COMMIT" else conn.rollback


@contextlib.contextmanager
def _locked(lock: Any, conn: Any, outer: Any) -> Any:
    with outer, lock:
        # An autocommit connection (the stores' own) leaves nothing open: no check a statement.
        if conn.autocommit:
            yield conn
            return
        if end := _ended(conn):
            end()
        try:
            yield conn
        except BaseException:
            # A failed statement outside `conn.transaction()` (a read) leaves the transaction
            # aborted: rolled back here, or the user's own `get`/`put` on the store would
            # fail with "current transaction is aborted" until the guard's next statement.
            with contextlib.suppress(Exception):
                if end := _ended(conn):
                    end()
            raise
        if end := _ended(conn):
            end()


@contextlib.asynccontextmanager
async def _alocked(lock: Any, conn: Any, outer: Any) -> Any:
    async with outer, lock:
        if conn.autocommit:  # as `_locked`
            yield conn
            return
        if end := _ended(conn):
            await end()
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(Exception):  # as `_locked`
                if end := _ended(conn):
                    await end()
            raise
        if end := _ended(conn):
            await end()


def _apg_connection(store: Any, pool_type: Any) -> Any:
    if isinstance(store.conn, pool_type):
        return store.conn.connection()
    return _alocked(store.lock, store.conn, _aouter_lock(store))


def _read_query(keys: list[tuple[str, str]], *, plain: bool = False) -> tuple[str, list[Any]]:
    # `plain`: the rows as they are, for a compare-and-set (as `_PG_SELECT`); a claim's batch
    # is one AIMessage's calls, so point lookups suffice there.
    if plain:
        return " UNION ALL ".join([_PG_SELECT_ROW] * len(keys)), [p for k in keys for p in k]
    if len(keys) > _PG_READ_POINTS:
        return _PG_READ_MANY, [[text for text, _ in keys], [key for _, key in keys]]
    return _points_text(len(keys)), [part for pair in keys for part in pair]


@functools.lru_cache(maxsize=_PG_READ_POINTS)
def _points_text(count: int) -> str:
    """The point lookups of `count` rows (built once per count, not per read)."""
    return " UNION ALL ".join([_PG_READ_ONE] * count)


def _read_answer(keys: list[tuple[str, str]], rows: Any) -> list[Any]:
    found = {(row[0], row[1]): row[2] for row in rows}
    return [_pg_loaded(found[k]) if k in found else None for k in keys]


# The ledger's reads and writes in SQL take the store as given, never one it wraps (unlike a
# claim, which must be atomic in the database: `_unwrap`). A wrapping store's `batch` may
# observe or change what passes (an audit; the crash tests' harness, which kills the worker
# right after an outcome is written): they keep going through it, as before issue 36.


def read_rows(store: BaseStore, keys: Iterable[tuple[tuple[str, ...], str]]) -> list[Any] | None:
    """The values of rows by key on PostgreSQL in one statement (None where absent).

    `PostgresStore.get` runs a statement per namespace that also refreshes TTLs (a write):
    a ledger read is one plain `SELECT`. Other stores return None (the caller uses
    `store.batch`).

    Raises:
        Exception: The database's own errors.
    """
    inner = store  # not `_unwrap(store)`: see the note above `read_rows`
    if _kind_of(inner) != "postgres":
        return None
    pg = _psycopg()
    wanted = [(_text(ns), key) for ns, key in keys]
    with _pg_connection(inner, pg.pool) as conn:
        rows = _statement(inner, conn, *_read_query(wanted))
        _end_pipelined(inner)
        return _read_answer(wanted, rows)


async def aread_rows(
    store: BaseStore, keys: Iterable[tuple[tuple[str, ...], str]]
) -> list[Any] | None:
    """Async `read_rows` (`AsyncPostgresStore`'s own connection; a sync one off the loop)."""
    inner = store  # not `_unwrap(store)`: see the note above `read_rows`
    kind = _kind_of(inner)
    if kind == "postgres":
        return await asyncio.to_thread(read_rows, inner, list(keys))
    if kind != "async_postgres":
        return None
    pg = _psycopg()
    wanted = [(_text(ns), key) for ns, key in keys]
    async with (
        _apg_connection(inner, pg.async_pool) as conn,
        conn.cursor(row_factory=pg.tuple_row) as cur,
    ):
        await cur.execute(*_read_query(wanted))
        rows = await cur.fetchall()
        await _aend_pipelined(inner)
        return _read_answer(wanted, rows)


def write_rows(store: BaseStore, puts: Iterable[tuple[tuple[str, ...], str, Any]]) -> bool:
    """Put ledger rows on PostgreSQL in one transaction that also wakes their waiters.

    The transaction `pg_notify`s each row's channel (`wake_names.channel`), delivered when it
    commits: a waiter that hears it reads the row as written. Other stores return False
    (the caller writes with `store.batch`, and their waiters poll).

    Raises:
        Exception: The database's own errors.
    """
    inner = store  # not `_unwrap(store)`: see the note above `read_rows`
    if _kind_of(inner) != "postgres":
        return False
    query, params = _write_query(list(puts))
    with (
        _pg_connection(inner, _psycopg().pool) as conn,
        contextlib.nullcontext() if conn.autocommit else conn.transaction(),
    ):
        _statement(inner, conn, query, params, fetch=False)
        _end_pipelined(inner)
    return True


async def awrite_rows(store: BaseStore, puts: Iterable[tuple[tuple[str, ...], str, Any]]) -> bool:
    """Async `write_rows` (`AsyncPostgresStore`'s own connection; a sync one off the loop)."""
    inner = store  # not `_unwrap(store)`: see the note above `read_rows`
    kind = _kind_of(inner)
    if kind == "postgres":
        return await asyncio.to_thread(write_rows, inner, list(puts))
    if kind != "async_postgres":
        return False
    query, params = _write_query(list(puts))
    async with (
        _apg_connection(inner, _psycopg().async_pool) as conn,
        contextlib.nullcontext() if conn.autocommit else conn.transaction(),
    ):
        await conn.execute(query, params)
        await _aend_pipelined(inner)
    return True


def mark_waiting(store: BaseStore, namespace: tuple[str, ...], key: str) -> bool | None:
    """Mark a claim on PostgreSQL as waited for, so its outcome notifies (`_write_query`).

    Call it once listening on the row's channel, then wait for the row's notification.

    Returns:
        True when the row is a claim in flight carrying the mark (wait for its
        notification); False when it is no longer in flight (read it again now); None
        when the store's outcomes never notify (not a `PostgresStore` as given, such as a
        store wrapping one, whose outcomes go through its own `batch`): poll.

    Raises:
        Exception: The database's own errors.
    """
    inner = store  # as `write_rows`: the store given, whose outcome writes the row
    if _kind_of(inner) != "postgres":
        return None
    with (
        _pg_connection(inner, _psycopg().pool) as conn,
        contextlib.nullcontext() if conn.autocommit else conn.transaction(),
    ):
        rows = _statement(inner, conn, _PG_MARK, _mark_params(namespace, key))
        _end_pipelined(inner)
    return bool(rows and rows[0][0])


async def amark_waiting(store: BaseStore, namespace: tuple[str, ...], key: str) -> bool | None:
    """Async `mark_waiting` (`AsyncPostgresStore`'s own connection; a sync one off the loop)."""
    inner = store
    kind = _kind_of(inner)
    if kind == "postgres":
        return await asyncio.to_thread(mark_waiting, inner, namespace, key)
    if kind != "async_postgres":
        return None
    from psycopg.rows import tuple_row
    from psycopg_pool import AsyncConnectionPool

    async with (
        _apg_connection(inner, AsyncConnectionPool) as conn,
        contextlib.nullcontext() if conn.autocommit else conn.transaction(),
        conn.cursor(row_factory=tuple_row) as cur,
    ):
        await cur.execute(_PG_MARK, _mark_params(namespace, key))
        row = await cur.fetchone()
        await _aend_pipelined(inner)
    return bool(row and row[0])


def _end_pipelined(store: Any) -> None:
    """Sync a pipelined store's connection (`PostgresStore(pipeline=True)`), as its `batch` does.

    In pipeline mode a statement's implicit transaction ends at the next sync, not when it
    returns: without one an outcome is neither committed (lost if the process dies) nor
    heard by the waiters, and its errors surface in some later statement.
    """
    pipe = getattr(store, "pipe", None)
    if pipe is not None:
        pipe.sync()


async def _aend_pipelined(store: Any) -> None:
    pipe = getattr(store, "pipe", None)
    if pipe is not None:
        await pipe.sync()


def listen_source(
    store: BaseStore,
) -> tuple[Any, str, dict[str, Any], Any] | None:
    """How to open a `LISTEN` connection beside a PostgreSQL store, or None for other stores.

    Returns:
        `(store, conninfo, connect kwargs, alive)`: the unwrapped store, the conninfo of its
        connection or pool (with the password psycopg hides from `info.dsn`), and a function
        that says whether the store's connection or pool is still open.
    """
    inner = _unwrap(store)
    if _kind_of(inner) not in ("postgres", "async_postgres"):
        return None
    conn = inner.conn
    kwargs: dict[str, Any] = {"connect_timeout": 5}
    conninfo = getattr(conn, "conninfo", None)
    if isinstance(conninfo, str):  # a pool: its conninfo and connection parameters
        extra = getattr(conn, "kwargs", None) or {}
        skip = ("autocommit", "prepare_threshold", "row_factory", "cursor_factory", "context")
        kwargs.update({k: v for k, v in extra.items() if k not in skip})
    else:
        from psycopg.conninfo import make_conninfo

        info = conn.info
        password = info.password
        conninfo = make_conninfo(info.dsn, password=password) if password else info.dsn
    return inner, conninfo, kwargs, lambda: not conn.closed


# -- async ----------------------------------------------------------------------------------------


async def acompare_and_set(store: BaseStore, op: Update) -> tuple[bool, Any]:
    """Async `compare_and_set`: the async stores' own connections, sync stores off the loop.

    Raises:
        Exception: The database's own errors.
    """
    store = _unwrap(store)
    kind = _kind_of(store)
    if kind == "async_sqlite":
        return await _async_sqlite_cas(store, op)
    if kind == "async_postgres":
        return (await _apg_run(store, functools.partial(_cas_plan, [op])))[0]
    if kind in ("sqlite", "postgres"):
        return await asyncio.to_thread(compare_and_set, store, op)
    return compare_and_set(store, op)  # in memory: a lock held only for microseconds


async def acompare_and_set_many(store: BaseStore, ops: list[Update]) -> list[tuple[bool, Any]]:
    """Async `compare_and_set_many`: `AsyncPostgresStore`'s connection, sync stores off the loop.

    Raises:
        PartlyWritten: As for `compare_and_set_many`.
        Exception: The database's own errors (then no op was written).
    """
    inner = _unwrap(store)
    kind = _kind_of(inner)
    if kind == "async_postgres" and len(ops) > 1:
        return await _apg_run(inner, functools.partial(_cas_plan, ops))
    if kind in ("sqlite", "postgres"):
        return await asyncio.to_thread(compare_and_set_many, store, ops)
    return [await acompare_and_set(store, op) for op in ops]


async def _async_sqlite_cas(store: Any, op: Update) -> tuple[bool, Any]:
    await aprepare(store)
    conn = store.conn
    prefix = _text(op.namespace)
    async with _aouter_lock(store), store.lock:
        await _aend_leftover(conn)
        await conn.execute("BEGIN IMMEDIATE")
        try:
            async with conn.execute(_SQLITE_SELECT, (prefix, op.key)) as cursor:
                row = await cursor.fetchone()
            written, current = _decide(_loads(row[0]) if row else None, op)
            if written:
                for text, key, value in _rows(op):
                    await conn.execute(_SQLITE_UPSERT, (text, key, orjson.dumps(value)))
        except BaseException:
            await conn.execute("ROLLBACK")
            raise
        await conn.execute("COMMIT")
    return written, current
