"""Opening a LangGraph store or checkpointer from a `--db` URI (SQLite or PostgreSQL), masked."""

from __future__ import annotations

import importlib
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard.records.store import load_store_value
from langgraph_replay_guard.replay.safe_decode import SafeSerializer

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore

__all__ = [
    "StoreURIError",
    "is_postgres",
    "mask_uri",
    "missing_tables",
    "not_a_checkpoint_database",
    "open_checkpointer",
    "open_store",
    "scrub",
]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_CONNINFO_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
# A libpq key/value connection string: "host=db port=5432 dbname=app user=app password=...".
_CONNINFO_START = re.compile(r"\s*[A-Za-z_]+\s*=")
_CONNINFO_KEY = re.compile(
    r"(?:^|\s)(?:host|hostaddr|port|dbname|user|password|service)\s*=", re.IGNORECASE
)
_QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


class StoreURIError(Exception):
    """A `--db` value that cannot be opened; the message never holds a password."""


def mask_uri(uri: str) -> str:
    """The URI with any password replaced by `***` (safe to print or log).

    Args:
        uri: A database URI, a libpq connection string or a file path.

    Returns:
        The masked text.
    """
    masked = _CONNINFO_PASSWORD.sub(r"\1***", uri)
    masked = _QUERY_PASSWORD.sub(r"\1***", masked)
    if "://" not in masked:
        return masked
    try:
        parts = urlsplit(masked)
        password = parts.password
    except ValueError:
        return re.sub(r"//[^@/]*@", "//***@", masked)
    if password is None:
        return masked
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def scrub(text: str, uri: str) -> str:
    """Remove the URI's password from a message (a driver error may quote the URI).

    Args:
        text: The message.
        uri: The `--db` value whose password must not show.

    Returns:
        The message with the password, as written and as decoded, replaced by `***`.
    """
    secrets: list[str] = []
    try:
        password = urlsplit(uri).password if "://" in uri else None
    except ValueError:
        password = None
    if password:
        secrets += [password, unquote(password)]  # percent-encoded in the URI
    for match in _CONNINFO_PASSWORD.finditer(uri):
        written = match.group(2)
        secrets.append(written)
        if written.startswith("'"):  # libpq quoting: 'a \'quoted\' secret'
            secrets.append(re.sub(r"\\(.)", r"\1", written[1:-1]))
    text = text.replace(uri, mask_uri(uri))
    for secret in sorted(set(secrets), key=len, reverse=True):
        if secret:
            text = text.replace(secret, "***")
    return text


def is_postgres(uri: str) -> bool:
    """Whether a `--db` value names a PostgreSQL database rather than a SQLite file.

    Args:
        uri: A `postgresql://` URI, a libpq key/value string (`host=... dbname=...`) or a
            SQLite path.

    Returns:
        True for a URI or a key/value string (unless a file has that very name).
    """
    if uri.startswith(_POSTGRES_SCHEMES):
        return True
    looks_like_conninfo = _CONNINFO_START.match(uri) and _CONNINFO_KEY.search(uri)
    return bool(looks_like_conninfo) and not Path(uri).exists()


def _sqlite_path(uri: str) -> Path:
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :])
    if uri.startswith("sqlite://"):
        msg = (
            f"{uri!r} is not a SQLite URI: use sqlite:///relative/path or sqlite:////absolute/path"
        )
        raise StoreURIError(msg)
    return Path(uri)


@contextmanager
def open_store(
    uri: str, *, must_exist: bool = True, read_only: bool = False, option: str = "--db"
) -> Iterator[BaseStore]:
    """Open the LangGraph store behind a `--db` value.

    Args:
        uri: A SQLite file path, `sqlite:///path`, a `postgresql://` URI or a libpq
            key/value string.
        must_exist: Refuse a SQLite path that does not exist (instead of creating it).
        read_only: Open without creating or changing anything: a SQLite file in read-only
            mode (`file:...?mode=ro`); no `setup()`, so no table is created. (PostgreSQL:
            `PostgresStore` reads with a statement that may refresh TTLs, which a read-only
            transaction refuses, so the store's session is not server-enforced read-only;
            it writes nothing to rows without a TTL, as the guard's are.) A database without
            the store's table yields an empty stand-in (`missing_tables`).
        option: The command-line option that gave `uri`, named by the error for a
            missing file.

    Yields:
        The store, set up (its tables created when missing) unless read-only. A stored value
        that is not a JSON object reads as `load_store_value`'s stand-in, so one damaged row
        cannot fail a whole listing.

    Raises:
        StoreURIError: The value cannot be opened; the message names the problem with the
            password masked.
    """
    with _open(uri, "store", must_exist=must_exist, read_only=read_only, option=option) as store:
        yield store


@contextmanager
def open_checkpointer(uri: str, *, read_only: bool = False) -> Iterator[BaseCheckpointSaver[Any]]:
    """Open the LangGraph checkpointer behind a `--db` value (same forms as `open_store`).

    Args:
        uri: The `--db` value.
        read_only: Open without writing anything, as `open_store` does (PostgreSQL: a
            session whose transactions are read-only); a database without the checkpoint
            tables yields an empty stand-in (`missing_tables`).

    Yields:
        A `SqliteSaver` or `PostgresSaver`, set up unless read-only. Its serializer is
        strict (`SafeSerializer`): a blob naming a type off LangGraph's allow-list, or in
        pickle format, is never imported, called or unpickled; it reads as an `Undecoded`
        value (reported to an enclosing `collect_undecoded`).

    Raises:
        StoreURIError: The value cannot be opened (password masked).
    """
    with _open(uri, "checkpointer", must_exist=True, read_only=read_only) as saver:
        yield saver


def missing_tables(opened: object) -> bool:
    """Whether a read-only `open_store`/`open_checkpointer` found no table to read.

    Args:
        opened: What the opener yielded.

    Returns:
        True for the empty stand-in of a database without the store's (or the
        checkpointer's) tables.
    """
    return isinstance(opened, _MissingStore | _MissingCheckpointer)


def not_a_checkpoint_database(uri: str, opened: object = None) -> str:
    """Why a `--db` without LangGraph's checkpoint tables is refused, and what to give.

    Args:
        uri: The `--db` value (shown with its password masked).
        opened: What `open_checkpointer` yielded for it, whose stand-in says what is
            missing (a table, or a column of another application's table of that name).

    Returns:
        One line for the command's error.
    """
    why = getattr(opened, "why", None) or f"it has no '{_TABLES['checkpointer']}' table"
    return (
        f"{mask_uri(uri)} is not a LangGraph checkpoint database ({why}): give --db the "
        "database your graph's checkpointer (SqliteSaver, PostgresSaver) writes to"
    )


_BACKENDS = {
    ("postgres", "store"): ("langgraph.store.postgres", "PostgresStore", "postgres"),
    ("postgres", "checkpointer"): ("langgraph.checkpoint.postgres", "PostgresSaver", "postgres"),
    ("sqlite", "store"): ("langgraph.store.sqlite", "SqliteStore", "sqlite"),
    ("sqlite", "checkpointer"): ("langgraph.checkpoint.sqlite", "SqliteSaver", "sqlite"),
}

# The table each kind needs to be read (LangGraph's own names, the same in both backends).
_TABLES = {"store": "store", "checkpointer": "checkpoints"}

# Columns of that table the reads use (both backends): another application's database may
# have a table of the same name, which is not a LangGraph database either.
_COLUMNS = {
    "store": ("prefix", "key", "value"),
    "checkpointer": ("thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint", "metadata"),
}


def _backend(kind: str, what: str) -> Any:
    module, name, extra = _BACKENDS[(kind, what)]
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        label = "PostgreSQL" if kind == "postgres" else "SQLite"
        msg = f"{label} support is not installed: pip install 'langgraph-replay-guard[{extra}]'"
        raise StoreURIError(msg) from exc


class _MissingStore(InMemoryStore):
    """The empty store a read-only open yields for a database without a store table."""

    why: str | None = None


class _MissingCheckpointer(InMemorySaver):
    """The empty saver a read-only open yields for a database without checkpoint tables."""

    why: str | None = None


def _missing(what: str, why: str) -> Any:
    """An empty in-memory stand-in for a read-only database without the tables of `what`."""
    opened = _MissingStore() if what == "store" else _MissingCheckpointer()
    opened.why = why
    return opened


def _lacks(table: str, has_table: bool, columns: set[str], what: str) -> str | None:
    """What the database lacks for `what` (its table, or a column of it), or None."""
    if not has_table:
        return f"it has no {table!r} table"
    # No columns read (a table only the search path shows): nothing is guessed.
    missing = [c for c in _COLUMNS[what] if columns and c not in columns]
    if missing:
        return f"its {table!r} table is another application's: it has no {missing[0]!r} column"
    return None


def _make(kind: str, what: str, conn: Any, *, read_only: bool) -> Any:
    """The store (reading values tolerantly) or the checkpointer on an open connection."""
    cls = _backend(kind, what)
    if what == "store":
        opened = cls(conn, deserializer=load_store_value)
    else:
        # The file may be someone else's: its blobs must not name code to run (issue 33).
        opened = cls(conn, serde=SafeSerializer())
    if read_only:
        opened.is_setup = True  # SQLite's classes would otherwise run setup() on first use
    else:
        opened.setup()
    return opened


@contextmanager
def _open(
    uri: str, what: str, *, must_exist: bool, read_only: bool, option: str = "--db"
) -> Iterator[Any]:
    if is_postgres(uri):
        _backend("postgres", what)  # first: a clear error without psycopg
        try:
            # PostgresStore reads with one statement that also refreshes TTLs (an UPDATE in
            # a CTE), which a read-only transaction refuses: a read-only store is a session
            # that creates nothing (no setup()); the checkpointer's session is read-only.
            server_read_only = read_only and what == "checkpointer"
            with _postgres_connection(uri, read_only=server_read_only) as conn:
                why = _postgres_lacks(conn, what) if read_only else None
                if why is not None:
                    yield _missing(what, why)
                else:
                    yield _make("postgres", what, conn, read_only=read_only)
        except StoreURIError:
            raise
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg"):
                detail = " ".join(scrub(str(exc), uri).split())  # libpq's are multi-line
                msg = f"cannot use the database {mask_uri(uri)}: {detail}"
                raise StoreURIError(msg) from None
            raise
        return
    path = _sqlite_path(uri)
    if (must_exist or read_only) and not path.is_file():
        shown = mask_uri(str(path))
        msg = (
            f"no SQLite database at {shown!r}: give {option} an existing SQLite file or a "
            "postgresql:// URI"
        )
        raise StoreURIError(msg)
    _backend("sqlite", what)
    try:
        conn = _sqlite_connection(path, what, read_only=read_only)
    except sqlite3.Error as exc:
        msg = f"cannot open the SQLite database {mask_uri(str(path))!r}: {exc}"
        raise StoreURIError(msg) from None
    try:
        why = _sqlite_lacks(conn, what) if read_only else None
        if why is not None:
            yield _missing(what, why)
        else:
            yield _make("sqlite", what, conn, read_only=read_only)
    except sqlite3.DatabaseError as exc:
        msg = f"cannot use the SQLite database {mask_uri(str(path))!r}: {exc}"
        raise StoreURIError(msg) from None
    finally:
        conn.close()


def _sqlite_connection(path: Path, what: str, *, read_only: bool) -> sqlite3.Connection:
    """A connection as the backend's `from_conn_string` makes it; read-only: `mode=ro`."""
    # The store runs its own BEGIN/COMMIT (autocommit mode); the saver uses sqlite3's default.
    isolation: Any = None if what == "store" else ""
    if not read_only:
        return sqlite3.connect(str(path), check_same_thread=False, isolation_level=isolation)
    target = f"file:{quote(str(path.resolve()))}?mode=ro"
    return sqlite3.connect(target, uri=True, check_same_thread=False, isolation_level=isolation)


def _sqlite_has_table(conn: sqlite3.Connection, table: str) -> bool:
    query = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
    return conn.execute(query, (table,)).fetchone() is not None


def _sqlite_lacks(conn: sqlite3.Connection, what: str) -> str | None:
    table = _TABLES[what]
    has_table = _sqlite_has_table(conn, table)
    query = "SELECT name FROM pragma_table_info(?)"
    columns = {row[0] for row in conn.execute(query, (table,))} if has_table else set()
    lacks = _lacks(table, has_table, columns, what)
    if lacks is None and what == "checkpointer" and not _sqlite_has_table(conn, "writes"):
        return "it has no 'writes' table"  # SqliteSaver reads a checkpoint's writes there
    return lacks


@contextmanager
def _postgres_connection(target: str, *, read_only: bool) -> Iterator[Any]:
    """A connection as `PostgresStore`/`PostgresSaver.from_conn_string` make it.

    Read-only: every transaction of the session is read-only, so the server itself refuses
    any write.
    """
    from psycopg import Connection
    from psycopg.rows import dict_row

    with Connection.connect(
        target, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        if read_only:
            conn.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
        yield conn


def _postgres_has_table(conn: Any, table: str) -> bool:
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (table,)).fetchone()
    return bool(row and row["found"])


def _postgres_lacks(conn: Any, what: str) -> str | None:
    table = _TABLES[what]
    has_table = _postgres_has_table(conn, table)
    query = (
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = %s AND table_schema = current_schema()"
    )
    rows = conn.execute(query, (table,)).fetchall() if has_table else []
    return _lacks(table, has_table, {row["column_name"] for row in rows}, what)
