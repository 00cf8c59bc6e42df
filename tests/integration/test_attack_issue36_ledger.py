"""Attacks on issue 36's ledger paths: a read that claims, a batch's one statement, async batches."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from langgraph_replay_guard import ReplayGuard

from .claim_graphs import POLICY, claim_graph, effect_tools, sends

pytestmark = pytest.mark.postgres


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


def _committed_rows(uri: str) -> list[tuple[str, str, str]]:
    import psycopg

    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT prefix, key, value->>'status' FROM store WHERE prefix LIKE '%.ledger.%'"
        ).fetchall()
    return [(str(p), str(k), str(s)) for p, k, s in rows]


def test_a_store_on_a_non_autocommit_connection_commits_claims_and_outcomes(pg_uri, tmp_path):
    import psycopg
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.store.postgres import PostgresStore
    from psycopg.rows import dict_row

    with psycopg.connect(pg_uri, autocommit=True) as setup:
        PostgresStore(setup).setup()
    effects = tmp_path / "effects.txt"
    conn = psycopg.connect(pg_uri, autocommit=False, prepare_threshold=0, row_factory=dict_row)
    try:
        guard = ReplayGuard(POLICY, store=PostgresStore(conn))
        graph = claim_graph("wrap", guard, effect_tools(effects, seconds=0), InMemorySaver())
        config = _config()
        graph.invoke({"messages": [HumanMessage("email Ann")]}, config)
        graph.invoke(None, config)
        assert sends(effects) == 1
        rows = _committed_rows(pg_uri)
        assert [s for _, _, s in rows if s != "None"] == ["completed"], rows
    finally:
        conn.close()
