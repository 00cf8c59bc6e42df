"""The result codec: any tool result becomes store-safe JSON and comes back exactly."""

from __future__ import annotations

import datetime as dt
import json
import logging
from typing import Any

import orjson
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from langgraph_replay_guard.replay import result_codec
from langgraph_replay_guard.replay.result_codec import (
    CODEC_VERSION,
    allow_ledger_types,
    decode_result,
    encode_result,
)
from tests.hypothesis_budget import examples
from tests.result_values import CASES, any_value, assert_store_safe, same

PROPERTY = settings(max_examples=examples(300), deadline=None)


def through_sqlite_json(value: dict[str, Any]) -> Any:
    """What SqliteStore does to a value: orjson out, orjson back in."""
    return orjson.loads(orjson.dumps(value))


def through_strict_json(value: dict[str, Any]) -> Any:
    """What PostgresStore does on the way in: strict JSON text (no NaN), then parsed back."""
    return json.loads(json.dumps(value, allow_nan=False))


@PROPERTY
@given(content=any_value, artifact=any_value, status=st.sampled_from(["success", "error"]))
def test_any_value_is_store_safe_and_round_trips(content: Any, artifact: Any, status: str) -> None:
    encoded = encode_result(content, artifact, status)
    assert_store_safe(encoded)
    for stored in (encoded, through_sqlite_json(encoded), through_strict_json(encoded)):
        got_content, got_artifact, got_status = decode_result(stored)
        assert same(got_content, content)
        assert same(got_artifact, artifact)
        assert got_status == status


@pytest.mark.parametrize("case", list(CASES))
def test_each_hard_case_round_trips_through_json(case: str) -> None:
    content, artifact, status = CASES[case]
    encoded = encode_result(content, artifact, status)
    assert_store_safe(encoded)
    got = decode_result(through_sqlite_json(encoded))
    assert same(got, (content, artifact, status))


def test_plain_results_stay_readable_json() -> None:
    artifact = {"rows": [1, 2.5, "x", None, True], "next": "$cursor"}
    assert encode_result("42 rows", artifact, "success") == {
        "codec": CODEC_VERSION,
        "status": "success",
        "content": "42 rows",
        "artifact": artifact,
    }
    assert encode_result("boom", None, "error") == {
        "codec": CODEC_VERSION,
        "status": "error",
        "content": "boom",
    }


def test_tagged_fields_keep_a_readable_preview() -> None:
    encoded = encode_result("x" * 500 + "\x00", b"\x00" * 10_000, "success")
    assert encoded["content_preview"] == "x" * 200
    assert encoded["artifact_preview"].startswith("b'\\x00")
    assert len(encoded["artifact_preview"]) <= 200
    assert "content" not in encoded
    assert "artifact" not in encoded


def test_a_dict_that_looks_like_a_tag_is_not_read_as_one() -> None:
    tricky = {"$bytes": "AA==", "$$": "$", "$": {"$obj": ["msgpack", "AA=="]}}
    encoded = encode_result("ok", {"k": b"\x00", "nested": tricky}, "success")
    assert same(decode_result(through_sqlite_json(encoded))[1], {"k": b"\x00", "nested": tricky})


def test_objects_go_through_langgraph_serializer() -> None:
    when = dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC)
    encoded = encode_result("ok", {"when": when, "day": when.date()}, "success")
    assert same(decode_result(through_sqlite_json(encoded))[1], {"when": when, "day": when.date()})


class Invoice(pydantic.BaseModel):
    number: int
    pdf: bytes
    issued: dt.date


def test_a_pydantic_artifact_is_dropped_unless_its_class_is_allowed() -> None:
    # A ledger row is read with an explicit allow-list (issue 33): a class off the list is
    # never stored as it is (it could not be read back); the application can allow it.
    invoice = Invoice(number=7, pdf=b"%PDF\x00", issued=dt.date(2024, 5, 1))
    encoded = encode_result("invoice 7", [invoice], "success")
    assert encoded["content"] == "invoice 7"
    assert "Invoice is not on the allow-list" in encoded["artifact_error"]
    assert decode_result(through_sqlite_json(encoded))[1] is None
    allow_ledger_types(Invoice)
    encoded = encode_result("invoice 7", [invoice], "success")
    assert decode_result(through_sqlite_json(encoded))[1] == [invoice]


class _Opaque:
    def __init__(self) -> None:
        self.callback = lambda: None


class _BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    __str__ = __repr__


def test_an_artifact_nothing_can_hold_is_dropped_and_the_content_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="langgraph_replay_guard"):
        encoded = encode_result("the content\x00", {"handle": _Opaque()}, "success")
    assert encoded["artifact_dropped"] == "dict"
    assert "_Opaque" in encoded["artifact_error"]
    assert_store_safe(encoded)
    assert decode_result(through_sqlite_json(encoded)) == ("the content\x00", None, "success")
    assert "artifact (dict) cannot be stored" in caplog.text


def test_content_nothing_can_hold_is_kept_as_text() -> None:
    encoded = encode_result(["text", _BadRepr()], _BadRepr(), "success")
    assert encoded["content_lossy"] == "list"
    assert encoded["artifact_dropped"] == "_BadRepr"
    content, artifact, _ = decode_result(through_sqlite_json(encoded))
    assert content == "<list that cannot be shown>"
    assert artifact is None


def test_self_referencing_and_very_deep_values() -> None:
    looped: list[Any] = []
    looped.append(looped)
    encoded = encode_result("ok", looped, "success")
    assert encoded["artifact_dropped"] == "list"
    deep: list[Any] = ["bottom\x00"]
    for _ in range(300):  # deeper than SqliteStore's JSON library accepts
        deep = [deep]
    encoded = encode_result(deep, None, "success")
    assert_store_safe(encoded)
    assert same(decode_result(through_sqlite_json(encoded))[0], deep)


def test_encode_never_raises_on_odd_inputs() -> None:
    odd = [
        object(),
        _BadRepr(),
        {_BadRepr(): 1},
        iter([1]),
        10**5000,  # more digits than int->str allows by default
        {"a\x00": {1: {2.5: {None: b""}}}},
        float("nan"),
    ]
    for value in odd:
        encoded = encode_result(value, value, "success")
        assert_store_safe(encoded)
        decode_result(through_sqlite_json(encoded))
    assert decode_result(encode_result(10**5000, None, "success"))[0] == 10**5000


def test_the_usual_result_does_not_touch_the_serializer(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse() -> None:
        raise AssertionError("the serializer was called for a plain string")

    monkeypatch.setattr(result_codec, "_serde", refuse)
    text = "ok " * 70
    assert decode_result(encode_result(text, None, "success")) == (text, None, "success")


def test_rows_in_the_original_format_still_decode() -> None:
    assert decode_result({"content": "done", "status": "success"}) == ("done", None, "success")
    assert decode_result(
        {"content": [{"type": "text", "text": "hi"}], "status": "error", "artifact": {"n": 1}}
    ) == ([{"type": "text", "text": "hi"}], {"n": 1}, "error")
    dropped = {"content": "done", "status": "success", "artifact_dropped": "Frame"}
    assert decode_result(dropped) == ("done", None, "success")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("not a mapping", "not a mapping"),
        ({"content": "x"}, "'status' is missing"),
        ({"status": "success"}, "no 'content'"),
        ({"codec": 3, "status": "success", "content": "x"}, "upgrade"),
        ({"codec": "2", "status": "success", "content": "x"}, "format 'codec'"),
        ({"codec": 2, "status": "success"}, "neither 'content' nor 'content_enc'"),
        ({"codec": 2, "status": 1, "content": "x"}, "status is a int"),
        ({"codec": 2, "status": "success", "content_enc": {"$nope": 1}}, "unknown tag"),
        ({"codec": 2, "status": "success", "content_enc": {"$str": "a\\x"}}, "unknown escape"),
        ({"codec": 2, "status": "success", "content_enc": {"$bytes": "!!"}}, "content_enc"),
        ({"codec": 2, "status": "success", "content_enc": {"$str": "a\x00\\0"}}, "a NUL"),
        ({"codec": 2, "status": "success", "content_enc": {"$str": "trailing\\"}}, "escape"),
        ({"codec": 2, "status": "success", "content_enc": {"$int": "zz"}}, "content_enc"),
        ({"codec": 2, "status": "success", "content_enc": {"$dict": [[1]]}}, "[key, value]"),
        ({"codec": 2, "status": "success", "content_enc": {"$set": [[1]]}}, "unhashable"),
        ({"codec": 2, "status": "success", "content_enc": {"$a": 1, "b": 2}}, "escaped key"),
        (
            # Never unpickle what a database row says: only LangGraph's msgpack format.
            {"codec": 2, "status": "success", "content_enc": {"$obj": ["pickle", "gAQu"]}},
            "format one of",
        ),
        (
            {"codec": 2, "status": "success", "content_enc": {"$obj": ["msgpack", "wcHB"]}},
            "content_enc",
        ),
    ],
)
def test_a_corrupt_value_raises_a_clear_value_error(value: Any, problem: str) -> None:
    with pytest.raises(ValueError, match="Cannot decode the recorded tool result") as caught:
        decode_result(value)
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "\\0 and \\ud800 written out, then a real NUL\x00",
        "\\\\0\x00\\",
        "\\" * 5 + "\x00" + "\ud800\\" + "\udfff" * 3,
        "C:\\users\\me\\dump.bin\x00" * 1000,
        "\x00" * 1000,
    ],
)
def test_backslashes_next_to_escapes_come_back(text: str) -> None:
    encoded = encode_result(text, {"k": text}, "success")
    assert_store_safe(encoded)
    assert decode_result(through_sqlite_json(encoded)) == (text, {"k": text}, "success")


# -- ledger rows' arguments (issue 27 item 7) -----------------------------------------------------


@PROPERTY
@given(args=any_value)
def test_a_ledger_row_keeps_any_arguments_in_a_store_safe_form(args: Any) -> None:
    from langgraph_replay_guard.replay.ledger import LedgerEntry

    row = LedgerEntry(key="n/m/c", status="started", tool="t", args=args, ran_args=args)
    value = row.to_value()
    assert_store_safe(value)
    for stored in (value, through_sqlite_json(value), through_strict_json(value)):
        back = LedgerEntry.from_value("n/m/c", stored)
        assert back.status == "started"
        assert same(back.args, args)
        assert same(back.ran_args, args)


def test_a_ledger_row_with_a_set_argument_goes_through_orjson() -> None:
    from langgraph_replay_guard.replay.ledger import LedgerEntry

    args = {"tags": {"a", "b"}, "when": dt.datetime(2026, 1, 2, tzinfo=dt.UTC), "raw": b"\x00"}
    value = LedgerEntry(key="k", status="started", args=args).to_value()
    back = LedgerEntry.from_value("k", orjson.loads(orjson.dumps(value)))
    assert back.args == args
    assert "'tags': {'a', 'b'}" in value["args_preview"]


def test_plain_arguments_stay_readable_in_the_row() -> None:
    from langgraph_replay_guard.replay.ledger import LedgerEntry

    value = LedgerEntry(key="k", status="started", args={"to": "ann@example.com"}).to_value()
    assert value["args"] == {"to": "ann@example.com"}
    assert "args_enc" not in value


def test_arguments_nothing_can_hold_keep_their_preview() -> None:
    from langgraph_replay_guard.replay.ledger import LedgerEntry

    class Opaque:
        def __reduce__(self) -> Any:
            raise TypeError("no")

        def __repr__(self) -> str:
            return "<Opaque>"

    value = LedgerEntry(key="k", status="started", args={"x": Opaque()}).to_value()
    assert_store_safe(value)
    assert value["args_dropped"] == "dict"
    assert LedgerEntry.from_value("k", orjson.loads(orjson.dumps(value))).args == "{'x': <Opaque>}"
