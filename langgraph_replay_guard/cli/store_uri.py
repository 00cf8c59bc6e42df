"""Opening a LangGraph store or checkpointer from a `--db` URI (SQLite or PostgreSQL), masked."""

from __future__ import annotations

import importlib
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from langgraph_replay_guard.records.store import load_store_value

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore

__all__ = [
    "StoreURIError",
    "is_postgres",
    "mask_uri",
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
def open_store(uri: str, *, must_exist: bool = True) -> Iterator[BaseStore]:
    """Open the LangGraph store behind a `--db` value.

    Args:
        uri: A SQLite file path, `sqlite:///path`, a `postgresql://` URI or a libpq
            key/value string.
        must_exist: Refuse a SQLite path that does not exist (instead of creating it).

    Yields:
        The store, set up (its tables created when missing). A stored value that is not a
        JSON object reads as `load_store_value`'s stand-in, so one damaged row cannot fail
        a whole listing.

    Raises:
        StoreURIError: The value cannot be opened; the message names the problem with the
            password masked.
    """
    with _open(uri, "store", must_exist=must_exist) as store:
        yield store


@contextmanager
def open_checkpointer(uri: str) -> Iterator[BaseCheckpointSaver[Any]]:
    """Open the LangGraph checkpointer behind a `--db` value (same forms as `open_store`).

    Yields:
        A `SqliteSaver` or `PostgresSaver`, set up.

    Raises:
        StoreURIError: The value cannot be opened (password masked).
    """
    with _open(uri, "checkpointer", must_exist=True) as saver:
        yield saver


_BACKENDS = {
    ("postgres", "store"): ("langgraph.store.postgres", "PostgresStore", "postgres"),
    ("postgres", "checkpointer"): ("langgraph.checkpoint.postgres", "PostgresSaver", "postgres"),
    ("sqlite", "store"): ("langgraph.store.sqlite", "SqliteStore", "sqlite"),
    ("sqlite", "checkpointer"): ("langgraph.checkpoint.sqlite", "SqliteSaver", "sqlite"),
}


def _backend(kind: str, what: str) -> Any:
    module, name, extra = _BACKENDS[(kind, what)]
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        label = "PostgreSQL" if kind == "postgres" else "SQLite"
        msg = f"{label} support is not installed: pip install 'langgraph-replay-guard[{extra}]'"
        raise StoreURIError(msg) from exc


@contextmanager
def _open(uri: str, what: str, *, must_exist: bool) -> Iterator[Any]:
    if is_postgres(uri):
        try:
            with _opener("postgres", what)(uri) as opened:
                opened.setup()
                yield opened
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
    if must_exist and not path.is_file():
        shown = mask_uri(str(path))
        msg = f"no SQLite database at {shown!r} (give --db a file path or a postgresql:// URI)"
        raise StoreURIError(msg)
    try:
        with _opener("sqlite", what)(str(path)) as opened:
            opened.setup()
            yield opened
    except sqlite3.DatabaseError as exc:
        msg = f"cannot use the SQLite database {mask_uri(str(path))!r}: {exc}"
        raise StoreURIError(msg) from None


def _opener(kind: str, what: str) -> Any:
    """`from_conn_string` of the backend, or for a store, its tolerant twin below."""
    if what == "store":
        return _postgres_store if kind == "postgres" else _sqlite_store
    return _backend(kind, what).from_conn_string


@contextmanager
def _postgres_store(target: str) -> Iterator[BaseStore]:
    """A `PostgresStore` connected as its `from_conn_string` does, reading values tolerantly."""
    store_class = _backend("postgres", "store")  # first: a clear error without psycopg
    from psycopg import Connection
    from psycopg.rows import dict_row

    with Connection.connect(
        target, autocommit=True, prepare_threshold=0, row_factory=dict_row
    ) as conn:
        yield store_class(conn, deserializer=load_store_value)


@contextmanager
def _sqlite_store(target: str) -> Iterator[BaseStore]:
    """A `SqliteStore` connected as its `from_conn_string` does, reading values tolerantly."""
    store_class = _backend("sqlite", "store")
    conn = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
    try:
        yield store_class(conn, deserializer=load_store_value)
    finally:
        conn.close()
