"""Fixtures for the integration tests: a real PostgreSQL server for the Postgres checkpointer.

`postgres_uri` uses `REPLAY_GUARD_TEST_POSTGRES_URI` when it is set; otherwise it starts a
throwaway server from the local PostgreSQL binaries (`initdb`, `pg_ctl`) for the test session
(one per pytest-xdist worker, each in its own directory on its own free port) and stops it at
the end. Without binaries the Postgres tests are skipped with a reason, except
under CI (`CI=true`), where they fail: CI must provide a server (`.ci/run` installs one).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import pg_template

os.environ["LANGSMITH_TRACING"] = "false"

URI_ENV = "REPLAY_GUARD_TEST_POSTGRES_URI"
HOW_TO = (
    f"install the PostgreSQL server binaries (apt-get install postgresql) or set {URI_ENV} "
    "to the URI of a server the tests may create databases on"
)


def _unavailable(reason: str) -> None:
    """Skip the test needing PostgreSQL, or fail it under CI (CI must start a server)."""
    message = f"PostgreSQL not available: {reason}; {HOW_TO}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (CI=true: Postgres tests must not be skipped)", pytrace=False)
    pytest.skip(message)


_find_binary = pg_template.find_binary  # the tests that start servers of their own import it


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Server:
    """A throwaway PostgreSQL server in a temporary directory (trust auth, localhost only)."""

    def __init__(self, initdb: str, pg_ctl: str) -> None:
        self.initdb = initdb
        self.pg_ctl = pg_ctl
        self.dir = Path(tempfile.mkdtemp(prefix="replay-guard-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "log"
        self.port = _free_port()
        self.prefix = pg_template.runuser_prefix(self.dir)
        self.started = False

    def _run(self, *args: str, timeout: float = 60) -> None:
        result = subprocess.run(
            [*self.prefix, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if result.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            msg = (
                f"`{' '.join(args)}` exited with {result.returncode}: "
                f"{(result.stderr or result.stdout).strip()[-2000:]} {log}".strip()
            )
            raise RuntimeError(msg)

    def start(self) -> str:
        # The run's template cluster when the xdist controller made one (one initdb for all
        # workers and for the tests that start servers of their own); else initdb here.
        # --no-sync: a throwaway cluster need not wait for its files to reach the disk.
        if not pg_template.copy_into(self.data, self.prefix):
            self._run(self.initdb, *pg_template.INITDB_OPTIONS, "-D", str(self.data))
        # A throwaway server: nothing needs to survive a power cut (fsync, full pages), but a
        # commit must survive the server's own crash (`pg_ctl -m immediate` in the tests), so
        # synchronous_commit stays on.
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c full_page_writes=off"
        )
        self._run(
            self.pg_ctl, "-D", str(self.data), "-o", options, "-l", str(self.log), "-w", "start"
        )
        self.started = True
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        try:
            if self.started:
                self._run(self.pg_ctl, "-D", str(self.data), "-m", "fast", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_uri() -> Iterator[str]:
    """URI of a PostgreSQL server for the session (the env variable's, or one started here)."""
    configured = os.environ.get(URI_ENV)
    if configured:
        yield configured
        return
    initdb, pg_ctl = _find_binary("initdb"), _find_binary("pg_ctl")
    if initdb is None or pg_ctl is None:
        _unavailable(
            "no PostgreSQL server binaries found (initdb/pg_ctl on PATH or in "
            f"/usr/lib/postgresql/*/bin) and {URI_ENV} is not set"
        )
    assert initdb is not None
    assert pg_ctl is not None
    server: _Server | None = None
    uri = ""
    # Under pytest-xdist each worker starts its own server: the free port one worker picked
    # may be taken by another's server before it binds, so a failed start tries another port.
    for attempt in range(3):
        server = None
        try:
            server = _Server(initdb, pg_ctl)
            uri = server.start()
            break
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            if server is not None:
                server.stop()
            if attempt == 2:
                _unavailable(f"could not start a throwaway server with {initdb}: {exc}")
    assert server is not None
    try:
        yield uri
    finally:
        server.stop()


class _Admin:
    """One connection to the server's `postgres` database, for the worker's CREATE DATABASE and
    DROP DATABASE (two new connections a test cost about 9 ms of the server's CPU, 217 tests a
    run). A connection that broke (a test that ended every backend) is replaced once."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.conn: Any = None

    def connection(self) -> Any:
        """The open connection (made now if there is none)."""
        import psycopg

        if self.conn is None or self.conn.closed:
            self.conn = psycopg.connect(self.uri, autocommit=True)
        return self.conn

    def version(self) -> int:
        """The server's version (`server_version_num`), read from the open connection."""
        return int(self.connection().info.server_version)

    def execute(self, sql: str) -> None:
        """Run `sql` in autocommit, on a new connection once if the open one broke."""
        import psycopg

        try:
            self.connection().execute(sql)
        except psycopg.OperationalError:
            self.close()
            self.connection().execute(sql)

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None


@pytest.fixture(scope="session")
def _pg_admin(postgres_uri: str) -> Iterator[_Admin]:
    admin = _Admin(postgres_uri)
    try:
        yield admin
    finally:
        admin.close()


@pytest.fixture
def pg_uri(postgres_uri: str, _pg_admin: _Admin) -> Iterator[str]:
    """A fresh, empty database for one test (so tests never see each other's checkpoints).

    When the server does not let us create databases, the session database is used: the
    tests use unique thread ids anyway.
    """
    import psycopg
    from psycopg.conninfo import make_conninfo

    name = f"replay_guard_{uuid.uuid4().hex[:12]}"
    try:
        # On the throwaway server (fsync off), a file copy of the template database takes
        # half the time of PostgreSQL 15's default, which writes every page to the WAL;
        # a configured server keeps its default (its checkpoints may be slow).
        copy = not os.environ.get(URI_ENV) and _pg_admin.version() >= 150000
        _pg_admin.execute(f'CREATE DATABASE "{name}"' + (" STRATEGY = FILE_COPY" if copy else ""))
    except psycopg.errors.InsufficientPrivilege:
        yield postgres_uri
        return
    except psycopg.OperationalError as exc:
        _unavailable(f"cannot connect to {postgres_uri}: {exc}")
    try:
        yield make_conninfo(postgres_uri, dbname=name)
    finally:
        with contextlib.suppress(psycopg.Error):
            _pg_admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def thread_id() -> str:
    """A thread id no other test uses."""
    return f"thread-{uuid.uuid4().hex}"


@pytest.fixture
def patient_batch_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's first claim waits up to 5 s for its siblings' claims (the product: 0.1 s).

    The window bounds a wait for a sibling that never says it arrived; every sibling here
    does, so a longer one changes no decision, only how late a thread of a loaded machine
    (a full `make test`, CI) may start and still join its batch's round. A test that counts
    the statements of a batch's claims uses it, or a slow thread counts as a second round.
    """
    from langgraph_replay_guard.storage import batch_claims

    monkeypatch.setattr(batch_claims, "WINDOW", 5.0)


@pytest.fixture(params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A LangGraph store of each backend: InMemoryStore, SqliteStore (a file), PostgresStore."""
    if request.param == "memory":
        from langgraph.store.memory import InMemoryStore

        yield InMemoryStore()
    elif request.param == "sqlite":
        from langgraph.store.sqlite import SqliteStore

        with SqliteStore.from_conn_string(str(tmp_path / "store.db")) as sqlite_store:
            sqlite_store.setup()
            yield sqlite_store
    else:
        from langgraph.store.postgres import PostgresStore

        with PostgresStore.from_conn_string(request.getfixturevalue("pg_uri")) as pg_store:
            pg_store.setup()
            yield pg_store


@pytest.fixture(autouse=True)
def warm_crashtest_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Start `crashtest`'s phase servers from the warm zygote (`tests/warm_children.py`).

    A phase server is a real process that forks a real process per phase, SIGKILLed at its crash
    point, exactly as a cold one; started warm it skips LangGraph's imports (a few seconds each,
    two servers per crash test). `tests/integration/test_crashtest.py`'s CLI tests and a server
    that must start cold (interpreter flags, another `PYTHON*` variable) still start cold.
    """
    import types

    from langgraph_replay_guard.crashtest import harness
    from tests import warm_children

    warm = types.SimpleNamespace(**{**vars(subprocess), "Popen": warm_children.popen})
    monkeypatch.setattr(harness, "subprocess", warm)
