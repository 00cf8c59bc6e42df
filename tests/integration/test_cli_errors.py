"""`replay-guard` on bad input, in a real subprocess: one clear line, a status, no traceback.

Bad trajectory and configuration files for `eval`, damaged rows in a record store, libpq
key/value connection strings with passwords, and output piped to a reader that stops early.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from langgraph_replay_guard import ExecutionRecord, RecordStore, compute_envelope_hash
from langgraph_replay_guard.records import FinalResponse, RecordHeader
from tests import warm_children

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
SMALL = FIXTURES / "eval_small.jsonl"
TOOLS = FIXTURES / "eval_tools.json"
COMMAND = [sys.executable, "-m", "langgraph_replay_guard.cli.main"]
ENV = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(REPO_ROOT)}
HINT = "expected one JSON trajectory per line"


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    # A real process forked from the warm zygote (tests/warm_children.py): its own pid, streams
    # and exit status, without paying LangGraph's imports in each of the 30-odd commands.
    return warm_children.run(
        [*COMMAND, *map(str, args)],
        cwd=REPO_ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def one_clean_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a refused command (no traceback, nothing on stdout)."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert proc.stdout == ""
    return lines[0]


# -- eval: trajectory files --------------------------------------------------------------


def test_eval_refuses_a_binary_file(tmp_path: Path) -> None:
    binary = tmp_path / "x.bin"  # the trajectories, gzipped
    binary.write_bytes(gzip.compress(SMALL.read_bytes(), mtime=0))
    proc = cli("eval", binary)
    assert proc.returncode == 2
    line = one_clean_line(proc)
    assert line.startswith("replay-guard eval: ")
    assert "x.bin line 1" in line
    assert "not UTF-8 text" in line
    assert HINT in line


def test_eval_refuses_a_text_file_that_is_not_json_lines(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("# my trajectories\nsee the wiki\n")
    proc = cli("eval", notes, "--json")
    assert proc.returncode == 2
    line = one_clean_line(proc)
    assert "notes.txt line 1 is not JSON" in line
    assert HINT in line
    assert "see --help" in line


def test_eval_refuses_a_pretty_printed_json_file(tmp_path: Path) -> None:
    pretty = tmp_path / "one.json"
    pretty.write_text(json.dumps({"id": "A", "calls": [{"name": "read"}]}, indent=2))
    proc = cli("eval", pretty)
    assert proc.returncode == 2
    assert "one.json line 1 is not JSON" in one_clean_line(proc)


def test_eval_refuses_json_lines_without_any_trajectory(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"calls": "nope"}\n[1, 2]\n')
    proc = cli("eval", rows)
    assert proc.returncode == 2
    line = one_clean_line(proc)
    assert "rows.jsonl holds no trajectory" in line
    assert "line 1: missing 'calls' list" in line
    assert HINT in line


def test_eval_skips_a_line_that_is_not_utf8_among_trajectories(tmp_path: Path) -> None:
    lines = SMALL.read_bytes().splitlines(keepends=True)
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(lines[0] + b"\xff\xfe broken \x80\n" + b"".join(lines[1:]))
    proc = cli("eval", mixed, "--policy", TOOLS, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["total"]["trajectories"] == 3
    assert report["malformed"][0]["line"] == 2
    assert "not UTF-8 text" in report["malformed"][0]["error"]


@pytest.mark.parametrize("what", ["a directory", "not JSON", "not UTF-8", "missing", "YAML"])
@pytest.mark.parametrize("option", ["--policy", "--config"])
def test_eval_names_an_unreadable_option_file(tmp_path: Path, option: str, what: str) -> None:
    bad = tmp_path / ("bad.yaml" if what == "YAML" else "bad.json")
    if what == "a directory":
        bad.mkdir()
    elif what == "not JSON":
        bad.write_text('{"tools": ')
    elif what == "not UTF-8":
        bad.write_bytes(b"\xff\xfe{}")
    elif what == "YAML":
        bad.write_text("tools: [unclosed\n")
    proc = cli("eval", SMALL, option, bad)
    assert proc.returncode == 2
    line = one_clean_line(proc)
    assert line.startswith(f"replay-guard eval: {option} {bad}")


def test_eval_refuses_a_missing_or_directory_input(tmp_path: Path) -> None:
    missing = cli("eval", tmp_path / "nope.jsonl")
    assert missing.returncode == 2
    assert "no such file" in one_clean_line(missing)
    folder = cli("eval", tmp_path)
    assert folder.returncode == 2
    assert "is a directory" in one_clean_line(folder)


# -- records: damaged rows ---------------------------------------------------------------


def a_record(execution_id: str) -> ExecutionRecord:
    envelope = {"graph": "g", "input": {"messages": [["user", f"question {execution_id}"]]}}
    return ExecutionRecord(
        header=RecordHeader(
            executionId=execution_id,
            createdUtcIso="2025-01-01T00:00:00.000000Z",
            envelopeHash=compute_envelope_hash(envelope),
            replayable=True,
        ),
        envelope=envelope,
        finalResponse=FinalResponse(payload={"answer": 42}, metadata={}),
    )


def sqlite_store_with_bad_rows(tmp_path: Path) -> str:
    """A SQLite store with one good record, a row that is not JSON and one that is a list."""
    from langgraph.store.sqlite import SqliteStore

    db = str(tmp_path / "records.db")
    with SqliteStore.from_conn_string(db) as store:
        store.setup()
        RecordStore(store).put(a_record("good-run"))
        store.put(("replay_guard", "records"), "not-a-header", {"hello": "world"})
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "INSERT INTO store (prefix, key, value) VALUES ('replay_guard.records', ?, ?)",
            [("not-json", "{'half"), ("a-list", "[1, 2]")],
        )
    return db


def check_listing_and_verify(db: str, bad: Sequence[str]) -> None:
    listed = cli("records", "list", "--db", db)
    assert listed.returncode == 0, listed.stderr
    assert "Traceback" not in listed.stderr
    rows = {line.split()[0]: line for line in listed.stdout.splitlines()[1:]}
    assert "replayable" in rows["good-run"]
    for key in bad:
        assert "unreadable" in rows[key]
        (warning,) = [line for line in listed.stderr.splitlines() if f"'{key}'" in line]
        assert warning.startswith(f"replay-guard records: warning: record '{key}' ")
    as_json = json.loads(cli("records", "list", "--db", db, "--json").stdout)
    problems = {row["executionId"]: row["problems"] for row in as_json}
    assert problems["good-run"] == []
    assert all(problems[key] for key in bad)

    verified = cli("records", "verify", "--db", db)
    assert verified.returncode == 1
    assert "Traceback" not in verified.stderr
    assert "ok        good-run" in verified.stdout
    for key in bad:
        assert f"CORRUPTED {key}: the stored value is not" in verified.stdout
    assert f"1 ok, {len(bad)} corrupted" in verified.stdout
    shown = cli("records", "show", bad[0], "--db", db)
    assert shown.returncode == 0, shown.stderr
    assert "record_corrupted" in shown.stdout


def test_records_list_and_verify_with_bad_sqlite_rows(tmp_path: Path) -> None:
    db = sqlite_store_with_bad_rows(tmp_path)
    check_listing_and_verify(db, ["not-json", "a-list", "not-a-header"])
    refused = cli("records", "verify", "not-json", "--db", db, "--json")
    assert refused.returncode == 1
    (entry,) = json.loads(refused.stdout)
    assert entry["ok"] is False
    assert "the stored value is not JSON" in entry["problems"][0]
    invalidated = cli("records", "invalidate", "a-list", "--db", db)
    assert invalidated.returncode == 1
    assert "'a-list' has an unreadable header: the stored value is not a JSON object" in (
        one_clean_line(invalidated)
    )


@pytest.mark.postgres
def test_records_list_and_verify_with_bad_postgres_rows(pg_uri: str) -> None:
    import psycopg
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        RecordStore(store).put(a_record("good-run"))
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for key, value in [("a-string", '"hello"'), ("a-list", "[1, 2]"), ("a-null", "null")]:
            conn.execute(
                "INSERT INTO store (prefix, key, value) "
                "VALUES ('replay_guard.records', %s, %s::jsonb)",
                (key, value),
            )
    check_listing_and_verify(pg_uri, ["a-string", "a-list", "a-null"])


# -- libpq key/value connection strings: the password is always masked --------------------

SECRETS = [
    ("host=127.0.0.1 port=1 user=u password=s3cret-kv dbname=d", "s3cret-kv"),
    ("host=127.0.0.1 port=1 user=u password='quoted s3cret' dbname=d", "quoted s3cret"),
    ("host=127.0.0.1 port = 1 password = 'it\\'s s3cret' dbname=d", "it's s3cret"),
]


@pytest.mark.parametrize(("conninfo", "secret"), SECRETS)
@pytest.mark.parametrize(
    "command",
    [["records", "list"], ["records", "verify"], ["records", "show", "x"], ["inspect"]],
)
def test_a_failing_conninfo_is_printed_masked(
    conninfo: str, secret: str, command: list[str]
) -> None:
    extra = ["--thread", "t"] if command == ["inspect"] else []
    proc = cli(*command, "--db", conninfo, *extra)
    assert proc.returncode == 2
    line = one_clean_line(proc)
    assert "cannot use the database host=127.0.0.1" in line
    assert "password=***" in line.replace("password = ***", "password=***")
    assert secret not in proc.stdout + proc.stderr
    assert "s3cret" not in proc.stdout + proc.stderr


@pytest.mark.postgres
def test_a_working_conninfo_with_a_password(pg_uri: str) -> None:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(pg_uri) as store:
        store.setup()
        RecordStore(store).put(a_record("pg-run"))
    conninfo = f"{pg_uri} password='pg s3cret'"  # the test server trusts every login
    listed = cli("records", "list", "--db", conninfo)
    assert listed.returncode == 0, listed.stderr
    assert "pg-run" in listed.stdout
    missing = cli("records", "show", "no-such-run", "--db", conninfo)
    assert missing.returncode == 2
    assert "password=***" in one_clean_line(missing)
    inspected = cli("inspect", "--db", conninfo, "--thread", "nobody", "--json")
    assert inspected.returncode == 1, inspected.stderr
    for proc in (listed, missing, inspected):
        assert "s3cret" not in proc.stdout + proc.stderr


# -- output piped to a reader that stops early --------------------------------------------


def run_with_closed_stdout(args: Sequence[str | Path]) -> tuple[int, str]:
    """Run the command with its stdout a pipe whose only reader has gone away."""
    proc = warm_children.popen(
        [*COMMAND, *map(str, args)],
        cwd=REPO_ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # before the child has written anything: it starts slower than this
    err = proc.stderr.read().decode()
    return proc.wait(timeout=120), err


def sqlite_store_with_records(tmp_path: Path, count: int) -> str:
    from langgraph.store.sqlite import SqliteStore

    db = str(tmp_path / "many.db")
    with SqliteStore.from_conn_string(db) as store:
        store.setup()
        records = RecordStore(store)
        for index in range(count):
            records.put(a_record(f"run-{index:04d}"), previous_chunks=0)
    return db


def test_output_to_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    db = sqlite_store_with_records(tmp_path, 3)
    commands: list[list[str | Path]] = [
        ["eval", SMALL, "--policy", TOOLS, "--json"],
        ["eval", SMALL, "--policy", TOOLS],
        ["records", "list", "--db", db, "--json"],
        ["records", "verify", "--db", db],
        ["inspect", "--db", db, "--thread", "nobody", "--json"],
    ]
    for args in commands:
        status, err = run_with_closed_stdout(args)
        assert status in (0, 1), (args, status, err)
        assert not_said_at_once(err) == [], (args, err)


def not_said_at_once(err: str) -> list[str]:
    """The lines of `err` other than eval's malformed lines, said as it meets them."""
    said = ("replay-guard eval: skipped ", "replay-guard eval: more malformed lines in ")
    return [line for line in err.splitlines() if not line.startswith(said)]


def big_eval_input(tmp_path: Path) -> Path:
    """One trajectory and many malformed lines: a --json report of more than a megabyte."""
    path = tmp_path / "big.jsonl"
    good = SMALL.read_text().splitlines()[0]
    path.write_text(good + "\n" + '{"calls": "nope"}\n' * 30_000)
    return path


@pytest.mark.parametrize("reader", ["head -c 10", "head -1"])
def test_json_piped_to_head_exits_quietly(tmp_path: Path, reader: str) -> None:
    big = big_eval_input(tmp_path)
    command = " ".join([*COMMAND, "eval", str(big), "--json"])
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{command} | {reader}"],
        cwd=REPO_ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert time.monotonic() - started < 120
    assert proc.stdout.startswith("{")
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "BrokenPipeError" not in proc.stderr
    assert not_said_at_once(proc.stderr) == []
    assert proc.returncode in (0, 1)


def test_inspect_shows_a_damaged_ledger_row_instead_of_failing(tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    db = str(tmp_path / "agent.db")
    with SqliteStore.from_conn_string(db) as store, SqliteSaver.from_conn_string(db) as saver:
        store.setup()
        saver.setup()
    with sqlite3.connect(db) as conn:
        conn.execute(
            "INSERT INTO store (prefix, key, value) VALUES ('replay_guard.ledger.t1', 'k', 'x{')"
        )
    proc = cli("inspect", "--db", db, "--thread", "t1")
    assert proc.returncode == 0, proc.stderr
    assert "replay ledger: 1 row(s)" in proc.stdout
    assert "corrupt" in proc.stdout
