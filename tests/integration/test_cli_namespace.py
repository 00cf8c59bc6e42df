"""`--namespace` reads the same in `inspect` and `records`: parts separated by '/'.

One SQLite file holds the ledger rows and execution records of two tenants
(`ReplayGuard(namespace=("replay_guard", <tenant>))`) for the same thread id; each command,
given a tenant's two-part namespace, shows that tenant's rows only.
"""

from __future__ import annotations

import json
import sqlite3
import warnings
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import GuardConfig, ReplayGuard, ReplayGuardWarning
from langgraph_replay_guard.cli.common import parse_namespace
from langgraph_replay_guard.cli.main import main

from .replay_graphs import asking_model, replay_graph

TENANTS = ("acme", "globex")
THREAD = "t-1"


@pytest.fixture(scope="module")
def two_tenants(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A SQLite file with one unsafe call's ledger row and one record per tenant."""
    db = tmp_path_factory.mktemp("tenants") / "agents.sqlite"
    store = SqliteStore(sqlite3.connect(db, check_same_thread=False, isolation_level=None))
    store.setup()

    @tool
    def send_email(to: str) -> str:
        """Send an email."""
        return f"sent to {to}"

    executions: dict[str, str] = {}
    for tenant in TENANTS:
        guard = ReplayGuard(
            GuardConfig(tools={"send_email": "unsafe"}),
            store=store,
            namespace=("replay_guard", tenant),
            record=True,
        )
        model = asking_model([("send_email", {"to": f"{tenant}@example.org"})])
        graph = guard.record(replay_graph(guard, model, [send_email], checkpointer=InMemorySaver()))
        config = {"configurable": {"thread_id": THREAD}}
        with warnings.catch_warnings():  # the in-memory checkpointer is fine here
            warnings.simplefilter("ignore", ReplayGuardWarning)
            graph.invoke({"messages": [HumanMessage("email them")]}, config, durability="sync")
        executions[tenant] = str(graph.last_execution_id)
    return db, executions


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        status = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        status = int(exc.code or 0)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.mark.parametrize("tenant", TENANTS)
def test_inspect_with_a_two_part_namespace_shows_that_tenants_rows(two_tenants, tenant, capsys):
    db, _ = two_tenants
    namespace = f"replay_guard/{tenant}"
    status, out, _ = run_cli(
        capsys, "inspect", "--db", str(db), "--thread", THREAD, "--namespace", namespace, "--json"
    )
    assert status == 0
    rows = json.loads(out)["ledger"]
    assert [(row["tool"], row["args"]) for row in rows] == [
        ("send_email", {"to": f"{tenant}@example.org"})
    ]
    status, text, _ = run_cli(
        capsys, "inspect", "--db", str(db), "--thread", THREAD, "--namespace", namespace
    )
    assert status == 0
    assert "replay ledger: 1 row(s)" in text
    # The default namespace holds neither tenant's rows.
    status, out, _ = run_cli(capsys, "inspect", "--db", str(db), "--thread", THREAD, "--json")
    assert status == 1
    assert json.loads(out)["ledger"] == []


@pytest.mark.parametrize("tenant", TENANTS)
def test_records_with_a_two_part_namespace_lists_that_tenants_records(two_tenants, tenant, capsys):
    db, executions = two_tenants
    other = next(t for t in TENANTS if t != tenant)
    status, out, _ = run_cli(
        capsys, "records", "list", "--db", str(db), "--namespace", f"replay_guard/{tenant}"
    )
    assert status == 0
    assert executions[tenant] in out
    assert executions[other] not in out


@pytest.mark.parametrize("command", [["inspect", "--thread", THREAD], ["records", "list"]])
def test_a_comma_separated_namespace_is_a_clear_usage_error(two_tenants, command, capsys):
    db, _ = two_tenants
    status, out, err = run_cli(
        capsys, *command, "--db", str(db), "--namespace", "replay_guard,acme"
    )
    assert status == 2
    assert out == ""
    assert "argument --namespace" in err
    assert "--namespace replay_guard/acme" in err


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("replay_guard", ("replay_guard",)),
        ("replay_guard/acme", ("replay_guard", "acme")),
        ("/replay_guard/tenant.A/", ("replay_guard", "tenant.A")),
    ],
)
def test_parse_namespace(text: str, parts: tuple[str, ...]) -> None:
    assert parse_namespace(text) == parts


@pytest.mark.parametrize(
    ("text", "hint"),
    [("", "replay_guard/acme"), ("/", "replay_guard/acme"), ("a, b", "--namespace a/b")],
)
def test_parse_namespace_refuses(text: str, hint: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match=hint):
        parse_namespace(text)
