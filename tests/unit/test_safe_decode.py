"""Issue 33: the strict reader rebuilds what LangGraph writes and nothing a blob merely names."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import pathlib
import uuid
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command, Interrupt, Send

from langgraph_replay_guard.replay.result_codec import decode_result, encode_result
from langgraph_replay_guard.replay.safe_decode import (
    SafeSerializer,
    Undecoded,
    collect_undecoded,
)

EXT_SINGLE_ARG, EXT_METHOD, EXT_PYDANTIC_V2 = 0, 3, 5


def _ext(code: int, *payload: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb(list(payload)))


def _system(marker: Path) -> ormsgpack.Ext:
    return _ext(EXT_SINGLE_ARG, "os", "system", f"touch {marker}")


def _message_hiding(inner: ormsgpack.Ext) -> ormsgpack.Ext:
    """An allowed AIMessage whose additional_kwargs hold a hostile extension."""
    fields = {"content": "hi", "additional_kwargs": {"k": inner}, "type": "ai"}
    return _ext(EXT_PYDANTIC_V2, "langchain_core.messages.ai", "AIMessage", fields, "x")


LANGGRAPH_VALUES: dict[str, Any] = {
    "messages": [
        HumanMessage("hi", id="h1"),
        AIMessage("", id="a1", tool_calls=[{"name": "t", "args": {"x": 1}, "id": "c1"}]),
        ToolMessage("ok", tool_call_id="c1", id="t1"),
    ],
    "command": Command(update={"n": 1}, goto=[Send("tools", {"x": 1})]),
    "interrupt": Interrupt(value={"approve": "a@x.org"}, id="i1"),
    "scalars": [
        dt.datetime(2026, 1, 2, 3, 4, tzinfo=dt.UTC),
        dt.date(2026, 1, 2),
        dt.timedelta(seconds=3),
        uuid.UUID(int=7),
        decimal.Decimal("1.5"),
        {1, 2},
        frozenset({"a"}),
        pathlib.Path("/tmp/x"),
    ],
}


@pytest.mark.parametrize("name", list(LANGGRAPH_VALUES))
def test_what_langgraph_writes_comes_back_from_the_strict_reader(name: str) -> None:
    value = LANGGRAPH_VALUES[name]
    serde = SafeSerializer()
    assert serde.loads_typed(JsonPlusSerializer().dumps_typed(value)) == value
    assert serde.undecoded == []


def test_a_name_off_the_list_is_opaque_and_collected(tmp_path: Path) -> None:
    serde = SafeSerializer()
    blob = ormsgpack.packb({"a": [_system(tmp_path / "marker")]})
    with collect_undecoded() as found:
        value = serde.loads_typed(("msgpack", blob))
    assert not (tmp_path / "marker").exists()
    assert isinstance(value["a"][0], Undecoded)
    assert "os.system" in str(value["a"][0])
    assert found == serde.undecoded == [value["a"][0]]


def test_a_name_hidden_inside_an_allowed_type_is_reported(tmp_path: Path) -> None:
    serde = SafeSerializer()
    value = serde.loads_typed(
        ("msgpack", ormsgpack.packb(_message_hiding(_system(tmp_path / "m"))))
    )
    assert not (tmp_path / "m").exists()
    assert isinstance(value, AIMessage)  # rebuilt; the hidden call left as data
    assert [u.what for u in serde.undecoded] == ["os.system"]


def test_a_method_off_the_list_is_never_called(tmp_path: Path) -> None:
    serde = SafeSerializer()
    blob = ormsgpack.packb(_ext(EXT_METHOD, "os", "system", f"touch {tmp_path}/m", "__call__"))
    assert isinstance(serde.loads_typed(("msgpack", blob)), Undecoded)
    assert not (tmp_path / "m").exists()


def test_a_pickle_blob_is_never_unpickled() -> None:
    serde = SafeSerializer()
    value = serde.loads_typed(("pickle", b"not even pickle"))
    assert isinstance(value, Undecoded)
    assert "pickle" in str(value)


@pytest.mark.parametrize("where", ["top", "nested"])
def test_a_ledger_result_naming_code_is_a_damaged_row(tmp_path: Path, where: str) -> None:
    ext = _system(tmp_path / "marker")
    packed = ormsgpack.packb(ext if where == "top" else _message_hiding(ext))
    row = {
        "codec": 2,
        "status": "success",
        "content_enc": {"$obj": ["msgpack", base64.b64encode(packed).decode("ascii")]},
    }
    with pytest.raises(ValueError, match="Cannot decode the recorded tool result"):
        decode_result(row)
    assert not (tmp_path / "marker").exists()


def test_allowed_objects_still_round_trip_through_the_ledger() -> None:
    artifact = {"when": LANGGRAPH_VALUES["scalars"], "messages": LANGGRAPH_VALUES["messages"]}
    assert decode_result(encode_result("ok", artifact, "success")) == ("ok", artifact, "success")
