"""`replay-guard records ...` in a real subprocess, against a SQLite file and PostgreSQL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from psycopg.conninfo import conninfo_to_dict

from langgraph_replay_guard import LoopAbortedError, ReplayGuard
from langgraph_replay_guard.records.recording import revive
from langgraph_replay_guard.testing import ScriptedChatModel
from tests import warm_children
from tests.integration.graphs import POLICY, ToolRuns, build_agent, make_tools

REPO_ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret-Pa55"
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return warm_children.run(
        [sys.executable, "-m", "langgraph_replay_guard.cli.main", "records", *args],
        cwd=REPO_ROOT,
        env={**os.environ, "LANGSMITH_TRACING": "false"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _url(uri: str) -> str:
    """The URI with a password (the test server trusts every login, so any password works)."""
    parts = conninfo_to_dict(uri)
    return (
        f"postgresql://{parts.get('user', 'postgres')}:{PASSWORD}@{parts['host']}:"
        f"{parts['port']}/{parts['dbname']}"
    )


@contextmanager
def open_store(kind: str, target: str) -> Iterator[Any]:
    if kind == "sqlite":
        from langgraph.store.sqlite import SqliteStore

        with SqliteStore.from_conn_string(target) as store:
            store.setup()
            yield store
    else:
        from langgraph.store.postgres import PostgresStore

        with PostgresStore.from_conn_string(target) as store:
            store.setup()
            yield store


@pytest.fixture(params=BACKENDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """(kind, --db value) of a fresh database."""
    if request.param == "sqlite":
        return "sqlite", str(tmp_path / "records.db")
    return "postgres", _url(request.getfixturevalue("pg_uri"))


def record_runs(kind: str, target: str) -> tuple[str, dict[str, Any], str]:
    """Record a looping agent run and a failing one; return their ids and the first output."""
    with open_store(kind, target) as store:
        guard = ReplayGuard(POLICY, store=store, record=True)
        model = ScriptedChatModel.looping("get_details_by_id", {"id": "P1002"}, times=5)
        agent = guard.record(build_agent(guard, model, make_tools(ToolRuns())))
        output = agent.invoke({"messages": [HumanMessage(content="Show me plan P1002.")]})
        good = str(agent.last_execution_id)
        config = POLICY.model_copy(update={"exit_behavior": "error"})
        failing = ReplayGuard(config, store=store, record=True)
        model = ScriptedChatModel.looping("get_details_by_id", {"id": "P1002"}, times=5)
        agent = failing.record(build_agent(failing, model, make_tools(ToolRuns())))
        with pytest.raises(LoopAbortedError):
            agent.invoke({"messages": [HumanMessage(content="Again.")]})
        return good, output, str(agent.last_execution_id)


def test_records_commands(db: tuple[str, str]) -> None:
    kind, target = db
    good, output, failed = record_runs(kind, target)

    listed = cli("list", "--db", target)
    assert listed.returncode == 0, listed.stderr
    assert good in listed.stdout
    assert failed in listed.stdout
    assert "replayable" in listed.stdout
    as_json = json.loads(cli("list", "--db", target, "--json").stdout)
    assert {r["executionId"] for r in as_json} == {good, failed}
    assert [r["failed"] for r in as_json if r["executionId"] == failed] == [True]

    shown = cli("show", good, "--db", target)
    assert shown.returncode == 0, shown.stderr
    assert "status:         replayable" in shown.stdout
    assert "guard_decision: get_details_by_id deny (duplicate)" in shown.stdout
    assert "guard_decision: get_details_by_id abort (repeat_limit)" in shown.stdout

    replayed = cli("replay", good, "--db", target)
    assert replayed.returncode == 0, replayed.stderr
    assert revive(json.loads(replayed.stdout)) == output
    result = json.loads(cli("replay", good, "--db", target, "--json").stdout)
    assert result["fromReplay"] is True
    assert result["originalExecutionId"] == good

    error = cli("replay", failed, "--db", target)
    assert error.returncode == 1
    assert "LoopAbortedError" in error.stderr

    verified = cli("verify", "--db", target)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "2 ok, 0 corrupted" in verified.stdout

    invalidated = cli("invalidate", good, "--db", target)
    assert invalidated.returncode == 0, invalidated.stderr
    refused = cli("replay", good, "--db", target)
    assert refused.returncode == 1
    assert "manually_invalidated" in refused.stderr
    assert refused.stdout == ""
    forced = cli("replay", good, "--db", target, "--force")
    assert forced.returncode == 0
    assert "warning: forced replay" in forced.stderr
    assert revive(json.loads(forced.stdout)) == output

    missing = cli("replay", "no-such-id", "--db", target)
    assert missing.returncode == 2
    assert "no-such-id" in missing.stderr

    for proc in (listed, shown, replayed, error, verified, invalidated, refused, forced, missing):
        assert PASSWORD not in proc.stdout + proc.stderr


def test_replay_checks_an_envelope_file(tmp_path: Path) -> None:
    target = str(tmp_path / "records.db")
    good, _, _ = record_runs("sqlite", target)
    envelope = json.loads(cli("show", good, "--db", target, "--json").stdout)["envelope"]
    same = tmp_path / "same.json"
    same.write_text(json.dumps({**envelope, "config": {"configurable": {"thread_id": "x"}}}))
    assert cli("replay", good, "--db", target, "--envelope", str(same)).returncode == 0
    envelope["input"]["messages"][0]["kwargs"]["content"] = "Show me plan P1003."
    other = tmp_path / "other.json"
    other.write_text(json.dumps(envelope))
    mismatch = cli("replay", good, "--db", target, "--envelope", str(other))
    assert mismatch.returncode == 1
    assert "expected envelope hash sha256:" in mismatch.stderr


def test_verify_reports_a_tampered_record(tmp_path: Path) -> None:
    import sqlite3

    target = str(tmp_path / "records.db")
    good, _, failed = record_runs("sqlite", target)
    with sqlite3.connect(target) as conn:
        conn.execute(
            "UPDATE store SET value = replace(value, 'Show me plan P1002.', 'Refund me.') "
            "WHERE prefix = 'replay_guard.records__bodies' AND key = ?",
            (f"{good}/0",),
        )
    verified = cli("verify", "--db", target)
    assert verified.returncode == 1
    assert f"CORRUPTED {good}" in verified.stdout
    assert f"ok        {failed}" in verified.stdout
    refused = cli("replay", good, "--db", target)
    assert refused.returncode == 1
    assert "record_corrupted" in refused.stderr


def test_bad_database_values(tmp_path: Path) -> None:
    missing = cli("list", "--db", str(tmp_path / "nothing.db"))
    assert missing.returncode == 2
    assert "no SQLite database" in missing.stderr
    assert not (tmp_path / "nothing.db").exists()  # never created by a read
    unreachable = f"postgresql://postgres:{PASSWORD}@127.0.0.1:1/postgres"
    refused = cli("list", "--db", unreachable)
    assert refused.returncode == 2
    assert "postgresql://postgres:***@127.0.0.1:1/postgres" in refused.stderr
    assert PASSWORD not in refused.stdout + refused.stderr
    conninfo = cli("list", "--db", f"postgresql://127.0.0.1:1/postgres?password={PASSWORD}")
    assert conninfo.returncode == 2
    assert PASSWORD not in conninfo.stdout + conninfo.stderr


def test_tenant_namespace(tmp_path: Path) -> None:
    target = str(tmp_path / "records.db")
    with open_store("sqlite", target) as store:
        guard = ReplayGuard(store=store, namespace=("replay_guard", "tenant-a"), record=True)
        agent = guard.record(build_agent(guard, ScriptedChatModel(), make_tools(ToolRuns())))
        agent.invoke({"messages": [HumanMessage(content="Hello.")]})
    execution_id = str(agent.last_execution_id)
    tenant = cli("list", "--db", target, "--namespace", "replay_guard/tenant-a")
    assert execution_id in tenant.stdout
    assert execution_id not in cli("list", "--db", target).stdout
