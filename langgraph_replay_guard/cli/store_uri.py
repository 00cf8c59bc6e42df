"""Opening a LangGraph store or checkpointer from a `--db` URI (SQLite or PostgreSQL), masked."""

from __future__ import annotations

import importlib
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore

__all__ = ["StoreURIError", "mask_uri", "open_checkpointer", "open_store", "scrub"]

_POSTGRES_SCHEMES = ("postgresql://", "postgres://")
_CONNINFO_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
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
    """Remove the URI's password from a message (a driver error may quote the URI)."""
    secrets: list[str] = []
    try:
        password = urlsplit(uri).password if "://" in uri else None
    except ValueError:
        password = None
    if password:
        secrets.append(password)
    for match in _CONNINFO_PASSWORD.finditer(uri):
        secrets.append(match.group(2).strip("'"))
    text = text.replace(uri, mask_uri(uri))
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


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
        uri: A SQLite file path, `sqlite:///path`, or a `postgresql://` URI.
        must_exist: Refuse a SQLite path that does not exist (instead of creating it).

    Yields:
        The store, set up (its tables created when missing).

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
    if uri.startswith(_POSTGRES_SCHEMES):
        backend = _backend("postgres", what)
        try:
            with backend.from_conn_string(uri) as opened:
                opened.setup()
                yield opened
        except StoreURIError:
            raise
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg"):
                msg = f"cannot use the database {mask_uri(uri)}: {scrub(str(exc), uri)}"
                raise StoreURIError(msg) from None
            raise
        return
    path = _sqlite_path(uri)
    if must_exist and not path.is_file():
        msg = f"no SQLite database at {str(path)!r} (give --db a file path or a postgresql:// URI)"
        raise StoreURIError(msg)
    backend = _backend("sqlite", what)
    try:
        with backend.from_conn_string(str(path)) as opened:
            opened.setup()
            yield opened
    except sqlite3.DatabaseError as exc:
        msg = f"cannot use the SQLite database {str(path)!r}: {exc}"
        raise StoreURIError(msg) from None
