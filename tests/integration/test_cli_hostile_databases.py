"""Issue 33, items 3 and 4: hostile checkpoints and ledger rows never crash or swell the CLI.

Real threads (a guarded graph on SqliteSaver/PostgresSaver and their stores) whose rows are
then rewritten by SQL into hostile payloads built here: a pickle-typed blob, corrupt msgpack,
msgpack and JSON nested 200,000 deep, and blobs bigger than `--max-item-bytes`. The CLI runs
in real subprocesses.
"""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import warm_children

from .replay_graphs import ask_once, replay_graph

DEPTH = 200_000
HOSTILE: dict[str, tuple[str, bytes]] = {
    # (serializer type, blob) as a checkpointer stores them; built here, no binary fixture.
    "pickle": ("pickle", pickle.dumps({"harmless": "but pickle-typed"})),
    "corrupt-msgpack": ("msgpack", b"\xc1\x93\xff\xff" + b"\x00" * 16),
    "deep-msgpack": ("msgpack", b"\x91" * DEPTH + b"\xc0"),  # [[[...[nil]...]]]
    "deep-json": ("json", b"[" * DEPTH + b"]" * DEPTH),
    "not-a-checkpoint": ("json", b"[1]"),  # decodes, but to no checkpoint (SQLite)
}
OPAQUE = {"pickle", "not-a-checkpoint"}
"""Payloads that may also read without an error (a pickle blob as an opaque value, issue 33
item 1; a list in PostgreSQL's messages blob): only no traceback is asserted for them."""
MB = 1024 * 1024


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return warm_children.run(
        [sys.executable, "-m", "langgraph_replay_guard.cli.main", *args],
        env={**os.environ, "LANGSMITH_TRACING": "false"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _clear(result: subprocess.CompletedProcess[str], *words: str) -> None:
    text = result.stderr + result.stdout
    assert "Traceback" not in text, result.stderr[-3000:]
    assert "RecursionError" not in text
    for word in words:
        assert word in text, (word, result.stderr[-3000:], result.stdout[-2000:])


@dataclass
class Db:
    """One database (checkpointer and store in it) and how to rewrite its rows."""

    kind: str
    uri: str

    def run_thread(self, thread: str, result_chars: int = 20) -> None:
        """A guarded thread with one unsafe call: a checkpoint, a guard channel, a ledger row."""
        with self._opened() as (saver, store):

            @tool
            def fetch(id: str) -> str:
                """Fetch a document."""
                return "x" * result_chars

            model = ScriptedChatModel(script=[ask_once([("fetch", {"id": "d1"})])] * 3)
            guard = ReplayGuard(GuardConfig(tools={"fetch": "unsafe"}), store=store)
            graph = replay_graph(guard, model, [fetch], checkpointer=saver)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                graph.invoke(
                    {"messages": [HumanMessage("fetch it")]},
                    {"configurable": {"thread_id": thread}},
                    durability="sync",
                )

    def _opened(self) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def opened() -> Iterator[tuple[Any, Any]]:
            if self.kind == "sqlite":
                from langgraph.checkpoint.sqlite import SqliteSaver
                from langgraph.store.sqlite import SqliteStore

                with (
                    SqliteSaver.from_conn_string(self.uri) as saver,
                    SqliteStore.from_conn_string(self.uri) as store,
                ):
                    saver.setup()
                    store.setup()
                    yield saver, store
            else:
                from langgraph.checkpoint.postgres import PostgresSaver
                from langgraph.store.postgres import PostgresStore

                with (
                    PostgresSaver.from_conn_string(self.uri) as saver,
                    PostgresStore.from_conn_string(self.uri) as store,
                ):
                    saver.setup()
                    store.setup()
                    yield saver, store

        return opened()

    def execute(self, sqlite_sql: str, postgres_sql: str, params: tuple[Any, ...]) -> None:
        if self.kind == "sqlite":
            with sqlite3.connect(self.uri) as conn:
                conn.execute(sqlite_sql, params)
        else:
            import psycopg

            with psycopg.connect(self.uri, autocommit=True) as conn:
                conn.execute(postgres_sql, params)

    def poison_checkpoints(self, thread: str, type_: str, blob: bytes) -> None:
        """Every checkpoint of the thread (PostgreSQL: its message blobs) becomes `blob`."""
        self.execute(
            "UPDATE checkpoints SET type = ?, checkpoint = ? WHERE thread_id = ?",
            "UPDATE checkpoint_blobs SET type = %s, blob = %s "
            "WHERE thread_id = %s AND channel = 'messages'",
            (type_, blob, thread),
        )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Db:
    if request.param == "sqlite":
        return Db("sqlite", str(tmp_path / "agent.sqlite"))
    return Db("postgres", request.getfixturevalue("pg_uri"))


def test_hostile_checkpoints_give_one_line_each_never_a_traceback(db: Db) -> None:
    db.run_thread("good")
    for name, (type_, blob) in HOSTILE.items():
        db.run_thread(name)
        db.poison_checkpoints(name, type_, blob)

    good = _cli("inspect", "--db", db.uri, "--thread", "good")
    assert good.returncode == 0, good.stderr
    _clear(good, "fetch")
    for name in HOSTILE:
        shown = _cli("inspect", "--db", db.uri, "--thread", name)
        _clear(shown, f"thread {name}")
        if name not in OPAQUE:
            assert shown.returncode == 1, (name, shown.stderr)
            _clear(shown, "left out: latest checkpoint", "cannot read it")
        assert "fetch" in shown.stdout, (name, shown.stdout)  # the ledger is still shown
        as_json = _cli("inspect", "--db", db.uri, "--thread", name, "--json")
        _clear(as_json, '"left_out"')

    exported = _cli("export", "--db", db.uri)
    # Trajectories were written; the pickle blob was shown opaque, never unpickled: status 3.
    assert exported.returncode == 3, exported.stderr
    _clear(exported, "trajectories")
    ids = {json.loads(line)["id"] for line in exported.stdout.splitlines()}
    assert "good" in ids
    assert ids <= {"good", *OPAQUE}, ids
    for name in ("corrupt-msgpack", "deep-msgpack", "deep-json"):
        _clear(exported, f"skipped thread {name!r}: checkpoint ")
    assert exported.stderr.count(": cannot read it (") >= 3, exported.stderr
    # A line each, the summary, and the two lines naming what was shown opaque.
    assert exported.stderr.count("\n") <= 3 + len(HOSTILE), exported.stderr


def test_an_item_above_max_item_bytes_is_named_and_not_read(db: Db) -> None:
    db.run_thread("big", result_chars=2 * MB)  # a 2 MB result: checkpoints and ledger row
    limited = _cli("inspect", "--db", db.uri, "--thread", "big", "--max-item-bytes", "1M")
    assert limited.returncode == 1, limited.stderr
    _clear(
        limited,
        "latest checkpoint",
        "above --max-item-bytes 1.0 MB: not read",
        "ledger row",
        "raise --max-item-bytes",
    )
    assert "xxxxxxxx" not in limited.stdout
    raised = _cli("inspect", "--db", db.uri, "--thread", "big", "--max-item-bytes", "64M")
    assert raised.returncode == 0, raised.stderr
    _clear(raised, "fetch")
    assert "left out" not in raised.stderr

    exported = _cli("export", "--db", db.uri, "--max-item-bytes", "1M")
    assert exported.returncode == 0, exported.stderr
    _clear(exported, "thread 'big': left out checkpoint", "above --max-item-bytes 1.0 MB")
    assert "xxxxxxxx" not in exported.stdout
    whole = _cli("export", "--db", db.uri, "--max-item-bytes", "64M")
    assert whole.returncode == 0, whole.stderr
    assert "x" * (2 * MB) in whole.stdout  # the result, read whole once the limit allows

    bad = _cli("inspect", "--db", db.uri, "--thread", "big", "--max-item-bytes", "lots")
    assert bad.returncode == 2
    _clear(bad, "--max-item-bytes", "not a size")


# The child's peak of Python allocations while the command runs (tracemalloc sees every
# bytes and str a driver returns). Started after the imports, so only reading counts;
# `ru_maxrss` is printed too, but the interpreter's import-time peak hides a 24 MB read.
_MEASURED = (
    "import resource, sys, tracemalloc\n"
    "import langgraph.checkpoint.sqlite, langgraph.store.sqlite\n"
    "import langgraph_replay_guard.cli.export_cmd, langgraph_replay_guard.cli.inspect_cmd\n"
    "from langgraph_replay_guard.cli.main import main\n"
    "if sys.argv[3].startswith('postgres'):\n"
    "    import psycopg, langgraph.checkpoint.postgres, langgraph.store.postgres\n"
    "tracemalloc.start()\n"
    "status = main(sys.argv[1:])\n"
    "peak = tracemalloc.get_traced_memory()[1] // 1024\n"
    "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
    "print(f'PEAK_KB {peak} MAXRSS_KB {rss}', file=sys.stderr)\n"
    "sys.exit(status)\n"
)


def _peak_kb(*args: str) -> tuple[int, subprocess.CompletedProcess[str]]:
    # A warm child (forked after the imports) measures the same: tracemalloc starts after them.
    result = warm_children.run(
        [sys.executable, "-c", _MEASURED, *args],
        env={**os.environ, "LANGSMITH_TRACING": "false"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    line = [x for x in result.stderr.splitlines() if x.startswith("PEAK_KB ")]
    assert line, result.stderr[-3000:]
    return int(line[-1].split()[1]), result


def test_the_default_limit_refuses_a_bigger_blob_without_loading_it(db: Db) -> None:
    db.run_thread("small")
    db.run_thread("huge", result_chars=24 * MB)  # above the default 16 MB
    for command in ("inspect", "export"):
        small_kb, _ = _peak_kb(command, "--db", db.uri, "--thread", "small")
        huge_kb, result = _peak_kb(command, "--db", db.uri, "--thread", "huge")
        # Loading the checkpoint would hold its 24 MB of bytes and the decoded 24 MB string
        # (on 94e4039 the peak is 50 MB and more above the small thread's).
        assert huge_kb - small_kb < 8 * 1024, (command, small_kb, huge_kb)
        _clear(result, "above --max-item-bytes 16.0 MB: not read")
