"""The crash test's copied SQLite databases: the schema `setup()` makes, no fsync per commit."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard.crashtest import child


def _schema(path: Path) -> list[tuple[str, str, str]]:
    """The tables, indexes and store migrations of a database."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        if path.name == "store.db":
            rows += conn.execute("SELECT 'migration', v, '' FROM store_migrations").fetchall()
    finally:
        conn.close()
    return sorted((str(a), str(b), str(c)) for a, b, c in rows)


def test_the_copied_databases_hold_what_setup_makes_on_new_files(tmp_path: Path) -> None:
    empty, own = tmp_path / "empty", tmp_path / "own"
    empty.mkdir()
    own.mkdir()
    child.empty_databases(empty)
    with (
        SqliteSaver.from_conn_string(str(own / "checkpoints.db")) as saver,
        SqliteStore.from_conn_string(str(own / "store.db")) as store,
    ):
        saver.setup()
        store.setup()
    for name in child.DATABASES:
        assert _schema(empty / name) == _schema(own / name)
        assert not (empty / f"{name}-wal").exists()  # folded in: the copy is the whole database


def test_a_phase_on_copies_sync_or_async_adds_no_table_and_commits_without_fsync(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    child.empty_databases(empty)
    expected = {name: _schema(empty / name) for name in child.DATABASES}
    for phase in ("sync", "async"):
        directory = tmp_path / phase
        directory.mkdir()
        for name in child.DATABASES:
            shutil.copyfile(empty / name, directory / name)
        if phase == "sync":
            saver, store = child._persistence(directory)
            assert saver.conn.execute("PRAGMA synchronous").fetchone() == (0,)
            assert store.conn.execute("PRAGMA synchronous").fetchone() == (0,)
            saver.conn.close()
            store.conn.close()
        else:
            loop = asyncio.new_event_loop()
            try:
                saver, store = child._apersistence(directory, loop)

                async def synchronous(conn: object) -> object:
                    async with conn.execute("PRAGMA synchronous") as cursor:  # type: ignore[attr-defined]
                        return await cursor.fetchone()

                assert loop.run_until_complete(synchronous(saver.conn)) == (0,)
                loop.run_until_complete(saver.conn.close())
                loop.run_until_complete(store.conn.close())
            finally:
                loop.close()
        assert {name: _schema(directory / name) for name in child.DATABASES} == expected
