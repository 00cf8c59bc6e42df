"""Issue 27, items 13 and 14: `inspect` finds the guard's store (`--store`), says when it finds
no ledger, and no read-only command writes to the database it reads (SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
import subprocess
import sys
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from langgraph_replay_guard.cli.main import main
from tests import warm_children

from .test_inspect_cli import _run_thread


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return warm_children.run(
        [sys.executable, "-m", "langgraph_replay_guard.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"LANGSMITH_TRACING": "false", "PATH": "/usr/bin:/bin"},
    )


def _two_files(tmp_path: Path) -> tuple[Path, Path]:
    """The README's setup: checkpoints in one SQLite file, the guard's store in another."""
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    checkpoints, guard = tmp_path / "checkpoints.db", tmp_path / "guard.db"
    saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    store = SqliteStore(sqlite3.connect(guard, check_same_thread=False, isolation_level=None))
    saver.setup()
    store.setup()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _run_thread(saver, store, "t.1")
    saver.conn.close()
    store.conn.close()
    return checkpoints, guard


def _tables(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return sorted(row[0] for row in conn.execute("SELECT name FROM sqlite_master"))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_inspect_says_when_the_ledger_is_in_another_store_and_reads_it_with_store(tmp_path):
    checkpoints, guard = _two_files(tmp_path)

    alone = _cli("inspect", "--db", str(checkpoints), "--thread", "t.1")
    assert alone.returncode == 0, alone.stderr
    assert "replay ledger: 0 row(s)" not in alone.stdout
    assert "replay ledger: NOT FOUND" in alone.stdout
    assert "no LangGraph store table" in alone.stdout
    assert "--store" in alone.stdout
    as_json = json.loads(
        _cli("inspect", "--db", str(checkpoints), "--thread", "t.1", "--json").stdout
    )
    assert as_json["ledger_found"] is False
    assert "no LangGraph store table" in as_json["ledger_missing"]

    both = _cli("inspect", "--db", str(checkpoints), "--store", str(guard), "--thread", "t.1")
    assert both.returncode == 0, both.stderr
    assert "outcome unknown" in both.stdout
    assert "send_email" in both.stdout
    assert "[replay_guard]" in both.stdout  # the checkpoint's guard channel, from --db

    other = _cli(
        "inspect", "--db", str(checkpoints), "--store", str(guard), "--thread", "t.1",
        "--namespace", "replay_guard/acme",
    )  # fmt: skip
    assert "NOT FOUND" in other.stdout
    assert "no replay ledger under the namespace 'replay_guard/acme'" in other.stdout


def test_read_only_commands_leave_sqlite_files_as_they_were(tmp_path):
    checkpoints, guard = _two_files(tmp_path)
    plain = tmp_path / "plain.db"
    with sqlite3.connect(plain) as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
    empty = tmp_path / "empty.db"
    empty.touch()
    files = [checkpoints, guard, plain, empty]
    before = {path: (_tables(path), _digest(path)) for path in files}

    for db in map(str, files):  # in this process: 28 commands
        for argv in (
            ["inspect", "--db", db, "--thread", "t.1"],
            ["inspect", "--db", db, "--store", db, "--thread", "t.1", "--json"],
            ["export", "--db", db],
            ["records", "list", "--db", db],
            ["records", "verify", "--db", db],
            ["records", "show", "--db", db, "some-id"],
            ["records", "replay", "--db", db, "some-id"],
        ):
            with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
                main(argv)
    for path in files:
        assert (_tables(path), _digest(path)) == before[path], path.name

    # Read-only files still read: a read-only open needs no write access.
    checkpoints.chmod(0o444)
    guard.chmod(0o444)
    seen = _cli("inspect", "--db", str(checkpoints), "--store", str(guard), "--thread", "t.1")
    assert "outcome unknown" in seen.stdout, seen.stderr

    # A database with none of the tables reads as empty, and gets none of them.
    listed = _cli("records", "list", "--db", str(plain))
    assert listed.returncode == 0, listed.stderr
    assert "no execution records" in listed.stdout
    assert _tables(plain) == ["notes"]

    # `invalidate` writes, and may: it is the one command that opens for writing.
    assert _cli("records", "invalidate", "--db", str(plain), "x").returncode == 2
    assert "store" in _tables(plain)


@pytest.mark.postgres
def test_read_only_commands_create_nothing_in_postgres(pg_uri):
    import psycopg

    def tables() -> list[str]:
        with psycopg.connect(pg_uri) as conn:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
            ).fetchall()
        return sorted(row[0] for row in rows)

    assert tables() == []
    # An empty database is not a checkpoint database: refused, and still nothing created.
    inspected = _cli("inspect", "--db", pg_uri, "--thread", "t")
    assert inspected.returncode == 2, inspected.stderr
    assert "is not a LangGraph checkpoint database" in inspected.stderr
    assert _cli("export", "--db", pg_uri).returncode == 2
    assert "no execution records" in _cli("records", "list", "--db", pg_uri).stdout
    assert _cli("records", "verify", "--db", pg_uri).returncode == 0
    assert _cli("records", "show", "--db", pg_uri, "x").returncode == 2
    assert tables() == []


@pytest.mark.postgres
def test_inspect_reads_a_postgres_store_beside_a_sqlite_checkpointer(tmp_path, pg_uri):
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.postgres import PostgresStore

    checkpoints = tmp_path / "checkpoints.db"
    saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    saver.setup()
    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _run_thread(saver, store, "mixed")
    saver.conn.close()
    alone = _cli("inspect", "--db", str(checkpoints), "--thread", "mixed")
    assert "NOT FOUND" in alone.stdout, alone.stderr
    both = _cli("inspect", "--db", str(checkpoints), "--store", pg_uri, "--thread", "mixed")
    assert both.returncode == 0, both.stderr
    assert "outcome unknown" in both.stdout
