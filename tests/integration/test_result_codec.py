"""Any tool result survives a real store put/get exactly once encoded (and often not without)."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.store.base import BaseStore

from langgraph_replay_guard.replay.result_codec import decode_result, encode_result
from tests.hypothesis_budget import examples
from tests.result_values import CASES, any_value, same

BIG = 50 * 1024 * 1024


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BaseStore]:
    from langgraph.store.sqlite import SqliteStore

    path = tmp_path_factory.mktemp("codec") / "store.db"
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
    store = SqliteStore(conn)
    store.setup()
    yield store
    conn.close()


@pytest.fixture(scope="module")
def postgres_store(postgres_uri: str) -> Iterator[BaseStore]:
    from langgraph.store.postgres import PostgresStore

    with PostgresStore.from_conn_string(postgres_uri) as store:
        store.setup()
        yield store


@pytest.fixture(
    scope="module",
    params=["memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def store(request: pytest.FixtureRequest) -> BaseStore:
    """Each shipped store, shared by the tests of this module (each test has its namespace)."""
    if request.param == "memory":
        from langgraph.store.memory import InMemoryStore

        return InMemoryStore()
    fixture: BaseStore = request.getfixturevalue(f"{request.param}_store")
    return fixture


def stored(store: BaseStore, value: dict[str, Any]) -> Any:
    """Put a value as a ledger row's result and read it back, as a replay would."""
    namespace = ("codec_test", uuid.uuid4().hex)
    store.put(namespace, "row", {"v": 1, "result": value}, index=False)
    item = store.get(namespace, "row")
    assert item is not None
    return item.value["result"]


def naive_is_lost(store: BaseStore, content: Any, artifact: Any, status: str) -> bool:
    """Whether the original row format fails to come back from the store as it was put."""
    try:
        back = stored(store, {"content": content, "status": status, "artifact": artifact})
    except Exception:  # the store refused the value: the result is lost after the side effect
        return True
    return not same((back["content"], back["artifact"]), (content, artifact))


@pytest.mark.parametrize("case", list(CASES))
def test_hard_results_come_back_exactly(store: BaseStore, case: str) -> None:
    content, artifact, status = CASES[case]
    assert same(decode_result(stored(store, encode_result(content, artifact, status))), CASES[case])


# What the original row format ({"content", "status", "artifact"}) loses today, by store.
NAIVE_LOST = {
    "sqlite": {"surrogates", "nan_inf", "int_keys", "bytes", "nested_mix"},
    "postgres": {"nul_in_content", "surrogates", "nan_inf", "int_keys", "bytes", "nested_mix"},
}


@pytest.mark.parametrize(
    "store_name", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_the_original_format_loses_these_results(
    request: pytest.FixtureRequest, store_name: str
) -> None:
    real_store: BaseStore = request.getfixturevalue(f"{store_name}_store")
    lost = {case for case, result in CASES.items() if naive_is_lost(real_store, *result)}
    assert lost >= NAIVE_LOST[store_name]


@pytest.fixture(scope="module")
def fifty_megabytes() -> list[tuple[str, dict[str, Any], bool]]:
    """Two 50 MB contents, each with its encoding and whether it is stored as it is: built
    and encoded once for the three stores (about 0.4 s of CPU each time), not once per store;
    `encode_result` is a pure function, and only its value is stored and read back."""
    readable = "caf\u00e9 log line\n" * (BIG // 14)  # plain JSON: stored as it is
    hostile = "x" * BIG + "\x00 then a lone surrogate \udc80"  # tagged
    return [
        (content, encode_result(content, None, "success"), content is readable)
        for content in (readable, hostile)
    ]


def test_fifty_megabytes_of_content_come_back(
    store: BaseStore, fifty_megabytes: list[tuple[str, dict[str, Any], bool]]
) -> None:
    for content, encoded, readable in fifty_megabytes:
        assert ("content" in encoded) is readable
        assert decode_result(stored(store, encoded)) == (content, None, "success")


class _Handle:
    def __init__(self) -> None:
        self.callback = lambda: None


def test_an_unstorable_artifact_is_dropped_and_the_content_kept(store: BaseStore) -> None:
    encoded = encode_result("wrote 3 files\x00", {"open": _Handle()}, "success")
    back = stored(store, encoded)
    assert decode_result(back) == ("wrote 3 files\x00", None, "success")
    assert back["artifact_dropped"] == "dict"


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(content=any_value, artifact=any_value, status=st.sampled_from(["success", "error"]))
def test_any_value_comes_back_from_each_store(
    store: BaseStore, content: Any, artifact: Any, status: str
) -> None:
    got = decode_result(stored(store, encode_result(content, artifact, status)))
    assert same(got, (content, artifact, status))


def test_async_sqlite_store(tmp_path: Path) -> None:
    from langgraph.store.sqlite.aio import AsyncSqliteStore

    async def scenario() -> None:
        async with AsyncSqliteStore.from_conn_string(str(tmp_path / "store.db")) as store:
            await store.setup()
            await _async_round_trips(store)

    asyncio.run(scenario())


@pytest.mark.postgres
def test_async_postgres_store(postgres_uri: str) -> None:
    from langgraph.store.postgres.aio import AsyncPostgresStore

    async def scenario() -> None:
        async with AsyncPostgresStore.from_conn_string(postgres_uri) as store:
            await store.setup()
            await _async_round_trips(store)

    asyncio.run(scenario())


async def _async_round_trips(store: BaseStore) -> None:
    namespace = ("codec_test", uuid.uuid4().hex)
    for case, result in CASES.items():
        await store.aput(namespace, case, encode_result(*result), index=False)
        item = await store.aget(namespace, case)
        assert item is not None
        assert same(decode_result(item.value), result), case


def test_a_commands_whole_update_comes_back_exactly(store: BaseStore) -> None:
    from langchain_core.messages import ToolMessage

    from langgraph_replay_guard.replay.result_codec import decode_update

    update = {
        "files": {"notes.md": {"content": ["line \x00 one", "caf\u00e9"], "modified_at": 1.5}},
        "todos": [{"content": "ship", "status": "in_progress"}],
        "messages": [ToolMessage("wrote notes.md", tool_call_id="c1", artifact={1: b"\x00"})],
    }
    back = stored(store, encode_result("wrote notes.md", None, "success", update=update))
    assert decode_result(back) == ("wrote notes.md", None, "success")
    restored = decode_update(back)
    assert restored is not None
    assert restored["files"] == update["files"]
    assert restored["todos"] == update["todos"]
    (message,) = restored["messages"]
    assert isinstance(message, ToolMessage)
    assert (message.content, message.tool_call_id, message.artifact) == (
        "wrote notes.md",
        "c1",
        {1: b"\x00"},
    )
    assert decode_update(encode_result("plain", None, "success")) is None
