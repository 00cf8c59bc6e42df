"""Issue 33 items 1-2: reading a database never imports or runs anything it names.

The hostile payloads are built here by code: checkpoint blobs holding LangGraph msgpack
extensions that name `os.system` and `subprocess.Popen` (with keyword arguments), a pickle
blob whose `__reduce__` calls `os.system`, and ledger rows whose `args_enc` and `content_enc`
hold such an extension in a `{"$obj": ["msgpack", ...]}`. Each "command" creates a marker
file: the tests assert that none exists, that `replay-guard inspect`/`export` (real
subprocesses) finish with exit status 3 (values left undecoded, shown opaque), and that
the guard, resuming over a hostile row, treats it as damaged (outcome unknown), never as
a result to replay.
"""

from __future__ import annotations

import base64
import os
import pickle
import sqlite3
import subprocess
import sys
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from langgraph_replay_guard import GuardConfig, ReplayGuard, ReplayUnsafeError
from langgraph_replay_guard.storage.ledger_io import ReplayLedger
from tests import warm_children

from .replay_graphs import asking_model, replay_graph
from .test_inspect_cli import _run_thread

# LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus).
EXT_SINGLE_ARG, EXT_KW_ARGS = 0, 2
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
PAYLOADS = ["os_system", "popen_kwargs", "pickle", "ledger_args"]
EXIT_UNDECODED = 3  # documented: finished, some value not decoded (shown opaque)


def _ext(code: int, module: str, name: str, arg: Any) -> ormsgpack.Ext:
    """A LangGraph msgpack extension asking the reader to call `module.name(arg)`."""
    return ormsgpack.Ext(code, ormsgpack.packb([module, name, arg]))


def _system(marker: Path) -> ormsgpack.Ext:
    return _ext(EXT_SINGLE_ARG, "os", "system", f"touch {marker}")


def _popen(marker: Path) -> ormsgpack.Ext:
    return _ext(EXT_KW_ARGS, "subprocess", "Popen", {"args": ["touch", str(marker)]})


def _pickled(marker: Path) -> bytes:
    class Payload:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    return pickle.dumps(Payload())


def _hostile_obj(ext: ormsgpack.Ext) -> dict[str, Any]:
    """The ledger's tagged form of an object, holding a hostile extension."""
    return {"$obj": ["msgpack", base64.b64encode(ormsgpack.packb(ext)).decode("ascii")]}


def _markers(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.glob("marker*"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"LANGSMITH_TRACING": "false", "PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:  # a worktree's package wins, as in the parent
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return warm_children.run(
        [sys.executable, "-m", "langgraph_replay_guard.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


# -- databases --------------------------------------------------------------------------------


@contextmanager
def _sqlite(
    tmp_path: Path,
) -> Iterator[tuple[str, Any, Any, Callable[[str, tuple[Any, ...]], None]]]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    db = tmp_path / "someone-elses.sqlite"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(db, check_same_thread=False, isolation_level=None)

    saver, store = SqliteSaver(connect()), SqliteStore(connect())
    saver.setup()
    store.setup()

    def sql(statement: str, params: tuple[Any, ...]) -> None:
        saver.conn.execute(statement.replace("%s", "?"), params)

    try:
        yield str(db), saver, store, sql
    finally:
        saver.conn.close()
        store.conn.close()


@contextmanager
def _postgres(uri: str) -> Iterator[tuple[str, Any, Any, Callable[[str, tuple[Any, ...]], None]]]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with (
        PostgresSaver.from_conn_string(uri) as saver,
        PostgresStore.from_conn_string(uri) as store,
    ):
        saver.setup()
        store.setup()

        def sql(statement: str, params: tuple[Any, ...]) -> None:
            saver.conn.execute(statement, params)

        yield uri, saver, store, sql


@pytest.fixture(params=BACKENDS)
def database(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, Any, Any, Callable[[str, tuple[Any, ...]], None]]]:
    """(the --db value, a saver, a store, run-SQL) on a fresh SQLite file or PostgreSQL db."""
    if request.param == "sqlite":
        with _sqlite(tmp_path) as opened:
            yield opened
    else:
        with _postgres(request.getfixturevalue("pg_uri")) as opened:
            yield opened


def _hostile_checkpoint(saver: Any, sql: Callable[..., None], thread: str, value: Any) -> None:
    """A checkpoint whose messages and guard channel hold `value` (an extension)."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {
        "messages": [HumanMessage("hello", id="h1"), value],
        "replay_guard": value,
    }
    versions = {"messages": saver.get_next_version(None, None)}
    versions["replay_guard"] = versions["messages"]
    checkpoint["channel_versions"] = dict(versions)
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    saver.put(config, checkpoint, {"source": "input", "step": -1}, versions)


def _pickle_write(saver: Any, sql: Callable[..., None], thread: str, blob: bytes) -> None:
    """A pending write of the thread's latest checkpoint turned into a pickle blob."""
    _hostile_checkpoint(saver, sql, thread, "plain")
    latest = saver.get_tuple({"configurable": {"thread_id": thread}})
    saver.put_writes(latest.config, [("messages", "placeholder")], "task-1")
    if type(saver).__name__ == "SqliteSaver":
        sql("UPDATE writes SET type = 'pickle', value = %s WHERE thread_id = %s", (blob, thread))
    else:
        sql(
            "UPDATE checkpoint_writes SET type = 'pickle', blob = %s WHERE thread_id = %s",
            (blob, thread),
        )


def _hostile_ledger_row(store: Any, thread: str, args: Any, content: Any) -> None:
    """Rewrite the thread's email row: hostile `args_enc` and result `content_enc`."""
    ledger = ReplayLedger(store)
    rows = [row for row in ledger.rows(thread) if row.tool == "send_email"]
    assert rows, "the thread left no ledger row to tamper with"
    item = store.get(ledger.namespace(thread), rows[0].key)
    value = dict(item.value)
    value.pop("args", None)
    value["args_enc"] = _hostile_obj(args)
    value["result"] = {"codec": 2, "status": "success", "content_enc": _hostile_obj(content)}
    store.put(ledger.namespace(thread), rows[0].key, value, index=False)


# -- the CLI ----------------------------------------------------------------------------------


@pytest.mark.parametrize("payload", PAYLOADS)
def test_inspect_and_export_run_nothing_a_hostile_database_names(
    database: tuple[str, Any, Any, Callable[..., None]], tmp_path: Path, payload: str
) -> None:
    db, saver, store, sql = database
    thread = f"evil-{uuid.uuid4().hex[:8]}"
    if payload == "os_system":
        _hostile_checkpoint(saver, sql, thread, _system(tmp_path / "marker-system"))
        named = "os.system"
    elif payload == "popen_kwargs":
        _hostile_checkpoint(saver, sql, thread, _popen(tmp_path / "marker-popen"))
        named = "subprocess.Popen"
    elif payload == "pickle":
        _pickle_write(saver, sql, thread, _pickled(tmp_path / "marker-pickle"))
        named = "a pickle blob"
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _run_thread(saver, store, thread)
        _hostile_ledger_row(
            store, thread, _popen(tmp_path / "marker-args"), _system(tmp_path / "marker-result")
        )
        named = "subprocess.Popen"

    inspected = _cli("inspect", "--db", db, "--thread", thread)
    as_json = _cli("inspect", "--db", db, "--thread", thread, "--json")
    exported = _cli("export", "--db", db, "--thread", thread)

    assert _markers(tmp_path) == []  # nothing the file named ran
    for done in (inspected, as_json, exported):
        assert done.returncode == EXIT_UNDECODED, done.stderr
        assert "Traceback" not in done.stderr
        assert f"not decoded, shown opaque: <not decoded: {named}" in done.stderr
        assert "nothing was imported or run" in done.stderr
    if payload in ("os_system", "popen_kwargs"):
        # The guard channel is shown as what it is, not as a rebuilt (or reset) state.
        assert f"<not decoded: {named}: not on the allow-list" in inspected.stdout
    if payload == "ledger_args":
        assert "send_email" in inspected.stdout  # the rest of the report is there
    assert exported.stdout.count("\n") == 1  # the thread is exported, the value left out


# -- the guard itself -------------------------------------------------------------------------


@pytest.fixture(params=BACKENDS)
def guard_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        with _sqlite(tmp_path) as (_db, _saver, store, _sql):
            yield store
    else:
        with _postgres(request.getfixturevalue("pg_uri")) as (_db, _saver, store, _sql):
            yield store


def test_the_guard_resuming_over_a_hostile_ledger_row_runs_nothing_and_replays_nothing(
    guard_store: Any, tmp_path: Path
) -> None:
    sent = tmp_path / "sent.log"

    @tool
    def send_email(to: str) -> str:
        """Send an email (unsafe)."""
        with sent.open("a") as log:
            log.write(f"{to}\n")
        return f"Email sent to {to}"

    @tool
    def approve_and_send(to: str) -> str:
        """Ask a human, then send (unsafe)."""
        if interrupt({"approve": to}) != "yes":
            return "Not approved"
        return f"Sent to {to} after approval"

    policy = {"send_email": "unsafe", "approve_and_send": "unsafe"}
    guard = ReplayGuard(GuardConfig(tools=policy), store=guard_store)
    calls = [("send_email", {"to": "bob@example.com"}), ("approve_and_send", {"to": "cy@x.org"})]
    graph = replay_graph(
        guard, asking_model(calls), [send_email, approve_and_send], checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first = graph.invoke({"messages": [HumanMessage("send both")]}, config, durability="sync")
        assert "__interrupt__" in first
        # Someone with write access to the store rewrites the email's row.
        _hostile_ledger_row(
            guard_store,
            config["configurable"]["thread_id"],
            _popen(tmp_path / "marker-args"),
            _system(tmp_path / "marker-result"),
        )
        # On resume LangGraph re-runs the whole tools node: the email's row is read back.
        raised: ReplayUnsafeError | None = None
        try:
            graph.invoke(Command(resume="yes"), config, durability="sync")
        except ReplayUnsafeError as exc:
            raised = exc

    assert _markers(tmp_path) == []
    # A damaged row: the outcome is unknown, so the unsafe call is neither replayed nor resent.
    assert raised is not None
    assert "unknown" in str(raised)
    assert sent.read_text().splitlines() == ["bob@example.com"]  # never sent again either
