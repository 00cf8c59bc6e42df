"""Replay latency from a SQLite record store, side by side with a real (scripted) agent run.

Run: python benchmarks/bench_replay.py
Goal (DESIGN.md item 9): serving a recorded response costs about 1 ms from SQLite, far below a
run of the agent (here a scripted model, so a real model would widen the gap by its latency).
One run, medians, ratios: compare the columns, not the absolute numbers.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("LANGSMITH_TRACING", "false")

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.store.sqlite import SqliteStore

from langgraph_replay_guard import (
    CachingReplayEngine,
    ExecutionRecord,
    RecordStore,
    ReplayEngine,
    ReplayGuard,
)
from langgraph_replay_guard.testing import ScriptedChatModel

RUNS = 30
REPLAYS = 300
TEN_MB = 10 * 1024 * 1024


@tool
def lookup(id: str) -> str:
    """Look up a record."""
    return f'{{"id": "{id}", "status": "active", "plan": "Premium", "data_limit_gb": 15}}'


def _model() -> ScriptedChatModel:
    script: list[Any] = [[("lookup", {"id": f"R{i}"})] for i in range(3)]
    return ScriptedChatModel(script=[*script, "Your plan is Premium with 15 GB."])


def _median_ms(fn: Callable[[], Any], times: int) -> float:
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def main() -> None:
    question = {"messages": [HumanMessage("Which plan am I on?")]}
    with (
        tempfile.TemporaryDirectory() as tmp,
        SqliteStore.from_conn_string(str(Path(tmp) / "records.db")) as store,
    ):
        store.setup()
        guard = ReplayGuard(store=store, record=True)
        records = RecordStore(store)

        def plain_run() -> Any:
            agent = create_agent(_model(), [lookup], middleware=[guard.middleware()])
            return agent.invoke(question)

        last: list[str] = []

        def recorded_run() -> Any:
            agent = guard.record(create_agent(_model(), [lookup], middleware=[guard.middleware()]))
            output = agent.invoke(question)
            last.append(str(agent.last_execution_id))
            return output

        run_ms = _median_ms(plain_run, RUNS)
        recorded_ms = _median_ms(recorded_run, RUNS)
        execution_id = last[-1]
        record = records.get(execution_id)
        assert record is not None
        assert record.header.replayable
        recorded_agent = guard.record(create_agent(_model(), [lookup]))
        expected = recorded_agent.replay(execution_id)

        def replay_from_sqlite() -> Any:
            loaded = records.get(execution_id)
            assert loaded is not None
            return ReplayEngine(loaded).replay().payload

        def replay_objects() -> Any:
            return recorded_agent.replay(execution_id)

        cache = CachingReplayEngine(records)

        def replay_cached() -> Any:
            return cache.replay(execution_id).payload

        assert replay_objects() == expected
        rows = [
            ("agent run (scripted model, 3 tool calls)", run_ms),
            ("same run, recorded to SQLite", recorded_ms),
            (
                "replay from SQLite: load + ReplayEngine (JSON)",
                _median_ms(replay_from_sqlite, REPLAYS),
            ),
            ("replay from SQLite, messages rebuilt", _median_ms(replay_objects, REPLAYS)),
            ("replay from CachingReplayEngine (hot)", _median_ms(replay_cached, REPLAYS)),
        ]

        big = record.model_copy(
            update={
                "finalResponse": record.finalResponse.model_copy(  # type: ignore[union-attr]
                    update={"payload": {"text": "x" * TEN_MB}}
                )
            }
        )
        big = ExecutionRecord.model_validate(big.model_dump())
        big.header.executionId = "big"
        put_ms = _median_ms(lambda: records.put(big), 3)

        def replay_big() -> Any:
            loaded = records.get("big")
            assert loaded is not None
            return ReplayEngine(loaded).replay().payload

        rows.append(("write a 10 MB record to SQLite", put_ms))
        rows.append(("replay a 10 MB record from SQLite", _median_ms(replay_big, 5)))

    width = max(len(name) for name, _ in rows)
    print(f"{'':{width}}  {'median ms':>10}  {'vs run':>8}")
    for name, ms in rows:
        print(f"{name:{width}}  {ms:10.3f}  {ms / run_ms:7.3f}x")
    print(
        f"\n({RUNS} runs, {REPLAYS} replays; record of {record.model_dump_json().__len__()} bytes)"
    )


if __name__ == "__main__":
    main()
