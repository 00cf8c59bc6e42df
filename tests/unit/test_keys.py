"""Call keys and canonical JSON: what hashes equal, what is rejected, and how."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import json
import re
import uuid
from decimal import Decimal

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from langgraph_replay_guard.decisions import keys
from langgraph_replay_guard.decisions.keys import (
    MAX_DEPTH,
    MAX_NODES,
    call_key,
    canonical_json,
    canonical_json_bytes,
    canonicalize,
    sha256_json,
)
from langgraph_replay_guard.errors import InvalidArgumentsError
from tests.hypothesis_budget import examples

HEX32 = re.compile(r"[0-9a-f]{32}")
MEMORY_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")


def same_key(a, b, tool="t"):
    return call_key(tool, a) == call_key(tool, b)


def nested_lists(levels):
    """`levels` lists nested inside each other, built without recursion."""
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


# --- call_key basics --------------------------------------------------------------------


def test_call_key_is_32_lowercase_hex():
    key = call_key("web_search", {"query": "capital of France"})
    assert HEX32.fullmatch(key), key


def test_call_key_is_stable_for_the_same_call():
    args = {"query": "capital of France", "limit": 5}
    assert call_key("web_search", args) == call_key("web_search", dict(args))


def test_call_key_ignores_dict_key_order():
    assert same_key({"a": 1, "b": 2}, {"b": 2, "a": 1})


def test_call_key_ignores_nested_dict_key_order():
    first = {"filter": {"lang": "en", "site": "x.org"}, "q": "a"}
    second = {"q": "a", "filter": {"site": "x.org", "lang": "en"}}
    assert same_key(first, second)


def test_integral_float_hashes_like_int():
    assert same_key({"n": 1}, {"n": 1.0})


def test_negative_zero_hashes_like_zero():
    assert same_key({"n": -0.0}, {"n": 0})


def test_non_integral_float_differs_from_int():
    assert not same_key({"n": 1}, {"n": 1.5})


def test_different_tool_gives_different_key():
    args = {"query": "x"}
    assert call_key("web_search", args) != call_key("read_page", args)


def test_different_args_give_different_keys():
    assert not same_key({"query": "x"}, {"query": "y"})


def test_tuple_hashes_like_list():
    assert same_key({"ids": (1, 2, 3)}, {"ids": [1, 2, 3]})


def test_list_order_matters():
    assert not same_key({"ids": [1, 2]}, {"ids": [2, 1]})


def test_plain_string_args_are_accepted():
    assert HEX32.fullmatch(call_key("echo", "hello"))
    assert call_key("echo", "hello") != call_key("echo", "hullo")


# --- ignore_args ------------------------------------------------------------------------


def test_ignore_args_drops_top_level_argument():
    first = {"query": "x", "request_id": "r-1"}
    second = {"query": "x", "request_id": "r-2"}
    assert call_key("s", first) != call_key("s", second)
    assert call_key("s", first, ignore_args=["request_id"]) == call_key(
        "s", second, ignore_args=["request_id"]
    )
    assert call_key("s", first, ignore_args=["request_id"]) == call_key("s", {"query": "x"})


def test_ignore_args_drops_dotted_nested_path():
    first = {"query": "x", "meta": {"request_id": "r-1", "user": "u"}}
    second = {"query": "x", "meta": {"request_id": "r-2", "user": "u"}}
    ignore = ["meta.request_id"]
    assert call_key("s", first, ignore_args=ignore) == call_key("s", second, ignore_args=ignore)
    # The rest of the nested dict still counts.
    third = {"query": "x", "meta": {"request_id": "r-1", "user": "someone else"}}
    assert call_key("s", first, ignore_args=ignore) != call_key("s", third, ignore_args=ignore)


def test_ignore_args_missing_path_is_harmless():
    args = {"query": "x"}
    assert call_key("s", args, ignore_args=["nope", "meta.request_id"]) == call_key("s", args)


def test_ignore_args_never_mutates_callers_dict():
    args = {"query": "x", "request_id": "r-1", "meta": {"request_id": "r-1", "ts": 5}}
    snapshot = json.loads(json.dumps(args))
    call_key("s", args, ignore_args=["request_id", "meta.request_id", "meta.ts"])
    assert args == snapshot


# --- canonical forms --------------------------------------------------------------------


def test_aware_datetime_equals_same_instant_in_utc():
    paris_summer = dt.timezone(dt.timedelta(hours=2))
    local = dt.datetime(2024, 6, 1, 14, 30, tzinfo=paris_summer)
    utc = dt.datetime(2024, 6, 1, 12, 30, tzinfo=dt.UTC)
    assert same_key({"when": local}, {"when": utc})
    assert canonicalize(local) == "2024-06-01T12:30:00+00:00"


def test_naive_datetime_is_iso_8601():
    naive = dt.datetime(2024, 6, 1, 12, 30, 15)
    assert canonicalize(naive) == "2024-06-01T12:30:15"
    assert same_key({"when": naive}, {"when": "2024-06-01T12:30:15"})


def test_date_is_iso_8601():
    assert canonicalize(dt.date(2024, 2, 29)) == "2024-02-29"


def test_uuid_equals_its_string_form():
    value = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert canonicalize(value) == "12345678-1234-5678-1234-567812345678"
    assert same_key({"id": value}, {"id": str(value)})


def test_integral_decimal_equals_int():
    assert canonicalize(Decimal("2")) == 2
    assert same_key({"n": Decimal("2")}, {"n": 2})
    assert same_key({"n": Decimal("2.000")}, {"n": 2})


def test_decimal_trailing_zeros_are_normalized():
    assert same_key({"price": Decimal("1.50")}, {"price": Decimal("1.5")})
    assert not same_key({"price": Decimal("1.50")}, {"price": Decimal("1.05")})


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1


def test_enum_hashes_as_its_value():
    assert canonicalize(Color.RED) == "red"
    assert same_key({"color": Color.RED}, {"color": "red"})
    assert same_key({"level": Level.LOW}, {"level": 1})


class Address(BaseModel):
    street: str
    number: int


class Customer(BaseModel):
    name: str
    address: Address


@dataclasses.dataclass
class Point:
    x: int
    y: float


def test_pydantic_model_hashes_like_equivalent_dict():
    model = Customer(name="Ada", address=Address(street="Main", number=3))
    as_dict = {"address": {"number": 3, "street": "Main"}, "name": "Ada"}
    assert same_key({"customer": model}, {"customer": as_dict})


def test_dataclass_hashes_like_equivalent_dict():
    assert same_key({"p": Point(x=1, y=2.5)}, {"p": {"y": 2.5, "x": 1}})
    assert not same_key({"p": Point(x=1, y=2.5)}, {"p": {"x": 1, "y": 3.5}})


def test_bytes_hash_to_their_sha256():
    digest = hashlib.sha256(b"abc").hexdigest()
    assert canonical_json(b"abc") == f'{{"$bytes_sha256":"{digest}"}}'
    assert same_key({"blob": b"abc"}, {"blob": bytearray(b"abc")})
    assert not same_key({"blob": b"abc"}, {"blob": b"abd"})


def test_sets_are_order_independent():
    assert same_key({"tags": {"b", "a", "c"}}, {"tags": frozenset(["c", "a", "b"])})
    assert same_key({"tags": {3, 1, 2}}, {"tags": [1, 2, 3]})


@pytest.mark.parametrize(
    ("value", "token"),
    [(float("nan"), "NaN"), (float("inf"), "Infinity"), (float("-inf"), "-Infinity")],
)
def test_non_finite_floats_are_bare_tokens_not_strings(value, token):
    # Issue 27 item 4: probe(q=nan) and probe(q="NaN") are different calls: the second must
    # not be answered with the first's result.
    assert canonical_json({"x": value}) == f'{{"x":{token}}}'
    assert not same_key({"x": value}, {"x": token})
    assert not same_key({"x": [value]}, {"x": [token]})
    assert not same_key({"x": {value, 1}}, {"x": {token, 1}})
    assert same_key({"x": value}, {"x": value})


def test_non_finite_decimals_key_like_the_floats():
    assert same_key({"x": Decimal("NaN")}, {"x": float("nan")})
    assert same_key({"x": Decimal("-Infinity")}, {"x": float("-inf")})
    assert not same_key({"x": Decimal("Infinity")}, {"x": "Infinity"})
    assert same_key({"x": -float("nan")}, {"x": float("nan")})  # one NaN, whatever its sign


def test_keys_of_ordinary_calls_are_unchanged():
    # The channel stores keys: a changed key would reset dedup for running threads.
    assert call_key("search", {"q": "x", "limit": 5}) == "1600c4e437bfa97b61c53329c16318ca"
    assert call_key("t", {"a": "x", "b": [1, 2, {"c": 1.5}]}) == "aed1e7610e67a550c8d93c1c986f60a1"
    assert call_key("t", {"a": 1.5, "n": None}) == "e980d1385a13c9ee6cba54771b747e18"
    assert same_key({"x": 1.0}, {"x": 1})
    assert same_key({"x": -0.0}, {"x": 0})


# --- canonical_json text ----------------------------------------------------------------


def test_canonical_json_sorts_keys_without_spaces():
    assert canonical_json({"b": 1, "a": [1, 2]}) == '{"a":[1,2],"b":1}'


def test_canonical_json_sorts_nested_keys():
    assert canonical_json({"z": {"y": 1, "x": 2.0}}) == '{"z":{"x":2,"y":1}}'


def test_canonical_json_keeps_non_ascii_as_utf8():
    text = canonical_json({"city": "Zürich", "greeting": "こんにちは"})
    assert text == '{"city":"Zürich","greeting":"こんにちは"}'
    assert "\\u" not in text


# --- errors -----------------------------------------------------------------------------


def test_unsupported_object_error_names_tool_and_path():
    with pytest.raises(InvalidArgumentsError) as info:
        call_key("send_email", {"attachments": [object()]})
    message = str(info.value)
    assert "send_email" in message
    assert "args.attachments[0]" in message
    assert info.value.path == "args.attachments[0]"
    assert not MEMORY_ADDRESS.search(message), message


def test_invalid_arguments_error_is_a_type_error():
    with pytest.raises(InvalidArgumentsError) as info:
        call_key("t", {"x": object()})
    assert isinstance(info.value, TypeError), "callers catching TypeError keep working"


def test_lambda_is_rejected_with_readable_message():
    with pytest.raises(InvalidArgumentsError) as info:
        call_key("schedule", {"callback": lambda: None})
    assert info.value.path == "args.callback"
    assert "schedule" in str(info.value)
    assert not MEMORY_ADDRESS.search(str(info.value))


def test_open_file_is_rejected(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello", encoding="utf-8")
    with path.open(encoding="utf-8") as handle, pytest.raises(InvalidArgumentsError) as info:
        call_key("upload", {"file": handle})
    assert info.value.path == "args.file"
    assert not MEMORY_ADDRESS.search(str(info.value))


def test_nested_path_in_dict_inside_list():
    with pytest.raises(InvalidArgumentsError) as info:
        call_key("t", {"items": [{"ok": 1}, {"when": object()}]})
    assert info.value.path == "args.items[1].when"


def test_self_referencing_list_is_a_cycle_error():
    looped: list = [1]
    looped.append(looped)
    with pytest.raises(InvalidArgumentsError) as info:
        call_key("t", {"x": looped})
    assert "cycle" in str(info.value)
    assert info.value.path == "args.x[1]"


def test_self_referencing_dict_is_a_cycle_error():
    looped: dict = {"a": 1}
    looped["self"] = looped
    with pytest.raises(InvalidArgumentsError, match="cycle"):
        call_key("t", looped)


def test_shared_reference_that_is_not_a_cycle_is_fine():
    shared = [1.5, 2.5]
    assert same_key({"a": shared, "b": shared}, {"a": [1.5, 2.5], "b": [1.5, 2.5]})


def test_nesting_deeper_than_max_depth_is_rejected():
    with pytest.raises(InvalidArgumentsError, match="nested more than") as info:
        call_key("t", {"x": nested_lists(150)})
    assert info.value.path.startswith("args.x[0][0]")


def test_nesting_up_to_max_depth_is_accepted():
    assert HEX32.fullmatch(call_key("t", nested_lists(MAX_DEPTH)))
    with pytest.raises(InvalidArgumentsError):
        call_key("t", nested_lists(MAX_DEPTH + 1))


def test_tuple_dict_key_is_rejected():
    with pytest.raises(InvalidArgumentsError) as info:
        call_key("t", {"coords": {(1, 2): "a"}})
    assert info.value.path == "args.coords"
    assert "tuple" in str(info.value)


def test_int_and_str_keys_that_collide_are_rejected():
    with pytest.raises(InvalidArgumentsError, match="two keys"):
        call_key("t", {1: "a", "1": "b"})


def test_lone_surrogate_from_model_json_gives_a_key():
    args = json.loads('{"query": "\\ud800"}')
    assert HEX32.fullmatch(call_key("web_search", args))
    assert call_key("web_search", args) != call_key("web_search", {"query": "\ufffd"})


def test_huge_exponent_decimal_gives_a_key_quickly():
    assert HEX32.fullmatch(call_key("pay", {"amount": Decimal("1E+5000")}))
    assert HEX32.fullmatch(call_key("pay", {"amount": Decimal("1E+10000000")}))
    assert call_key("pay", {"amount": Decimal("2E+2")}) == call_key("pay", {"amount": 200})


def test_integer_too_long_for_json_is_rejected_by_name():
    with pytest.raises(InvalidArgumentsError, match=r"args\.n.*4,000 digits"):
        call_key("t", {"n": 10**5000})
    # As a key too (a ValueError from json.dumps before): named, with the fix.
    with pytest.raises(InvalidArgumentsError, match=r"args\.m.*integer key.*4,000 digits"):
        call_key("t", {"m": {10**5000: 1}})
    assert HEX32.fullmatch(call_key("t", {"m": {10**3999: 1}}))


def test_plain_values_count_toward_the_node_limit():
    with pytest.raises(InvalidArgumentsError, match="larger than"):
        call_key("t", {"ids": list(range(MAX_NODES + 10))})


def test_shared_references_cannot_blow_up():
    shared: list = []
    for _ in range(40):
        shared = [shared, shared]  # 2**40 paths through 40 objects
    with pytest.raises(InvalidArgumentsError, match="larger than"):
        call_key("t", {"tree": shared})


@pytest.mark.parametrize("leaf", ["x", 1.5], ids=["plain", "canonicalized"])
def test_shared_references_are_refused_without_walking_every_path(leaf):
    # 40 objects, 2**40 paths: refused by counting a container met again, not by walking a
    # million values first (3 s at 42ea298 for each of the two walks a key makes).
    shared: list = [leaf]
    for _ in range(40):
        shared = [shared, shared]
    with pytest.raises(InvalidArgumentsError, match="holds the same data many times over"):
        call_key("t", {"tree": shared})
    # Each second reference one level deeper than the first: counted again all the same.
    deeper: list = [leaf]
    for _ in range(40):
        deeper = [deeper, [deeper]]
    with pytest.raises(InvalidArgumentsError, match="holds the same data many times over"):
        call_key("t", {"tree": deeper})


def test_a_pydantic_model_that_cannot_be_dumped_names_the_argument():
    class Opaque:
        pass

    class Holder(BaseModel):
        model_config = {"arbitrary_types_allowed": True}
        item: Opaque

    with pytest.raises(
        InvalidArgumentsError, match=r"Argument 'args\.held' is a .*Holder"
    ) as error:
        call_key("t", {"held": Holder(item=Opaque())})
    assert error.value.path == "args.held"


@dataclasses.dataclass
class _Pair:
    left: object
    right: object


def test_shared_dataclass_instances_are_refused_without_walking_every_path():
    pair = _Pair(1.5, "x")
    for _ in range(40):
        pair = _Pair(pair, pair)
    with pytest.raises(InvalidArgumentsError, match="holds the same data many times over"):
        call_key("t", {"tree": pair})
    small = _Pair(1.5, "x")
    for _ in range(3):
        small = _Pair(small, small)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keys, "_FIRST_LOOK", 0)  # the walk that remembers what it walked
        assert canonical_json({"tree": small}) == canonical_json(
            {"tree": _unshared(canonicalize(small))}
        )


def _unshared(value):
    """The same data with every container its own object."""
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("leaf", ["x", 1.5], ids=["plain", "canonicalized"])
def test_shared_data_within_the_limit_keys_as_its_copy(leaf):
    # Past the first look (10,000 values) a walk counts a container met again without
    # walking it: the key must be the one the same data, unshared, gets.
    row = {"name": leaf, "tags": [leaf, {"deep": [leaf]}]}
    rows = [row] * 2_000  # 16,000 values
    args = {"rows": rows, "again": {"rows": rows}}
    assert call_key("t", args) == call_key("t", _unshared(args))
    assert canonical_json(args) == canonical_json(_unshared(args))


@pytest.mark.parametrize(
    ("leaf", "wraps"),
    [
        ("x", MAX_DEPTH - 3),  # its lists reach the limit
        (1.5, MAX_DEPTH - 3),
        (Decimal("1.5"), MAX_DEPTH - 5),  # only the leaf does: a value that is not JSON counts
        (dt.date(2026, 1, 1), MAX_DEPTH - 5),
    ],
    ids=["plain", "float", "decimal", "date"],
)
def test_shared_data_met_deeper_still_meets_the_depth_limit(leaf, wraps):
    # `inner` is walked at depth 2 first; met again near the depth limit, what it holds is
    # too deep, and the error must be the one the unshared data gets.
    def build(inner):
        deep = inner()
        for _ in range(wraps):
            deep = [deep]
        return {"a_wide": [inner() for _ in range(2_500)], "deep": deep}  # 12,500 values first

    one = {"a": [[[leaf]]]}
    with pytest.raises(InvalidArgumentsError, match="nested more than") as shared:
        call_key("t", build(lambda: one))
    with pytest.raises(InvalidArgumentsError, match="nested more than") as unshared:
        call_key("t", build(lambda: {"a": [[[leaf]]]}))
    assert str(shared.value) == str(unshared.value)


# --- size -------------------------------------------------------------------------------


def test_large_string_argument_hashes():
    big = "x" * (5 * 1024 * 1024)
    key = call_key("write_file", {"content": big})
    assert HEX32.fullmatch(key)
    assert key != call_key("write_file", {"content": big + "y"})


def test_large_int_list_argument_hashes():
    numbers = list(range(200_000))
    key = call_key("sum", {"values": numbers})
    assert HEX32.fullmatch(key)
    assert key == call_key("sum", {"values": tuple(numbers)})


# --- sha256_json ------------------------------------------------------------------------


def test_sha256_json_format_and_value():
    value = {"b": [1, 2.0], "a": "é"}
    result = sha256_json(value)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", result), result
    expected = hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
    assert result == f"sha256:{expected}"
    assert result == sha256_json({"a": "é", "b": [1, 2]})


# -- the orjson fast path gives the keys the standard encoder gave ---------------------------

_ANY_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)
_PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | _ANY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_ANY_TEXT, inner, max_size=4),
    max_leaves=25,
)


def _stdlib_json(args):
    """Canonical JSON as the standard encoder wrote it before the orjson fast path."""
    text = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", "surrogatepass")


def _stdlib_key(tool, args):
    """The call key as computed before the orjson fast path."""
    return xxhash.xxh3_128_hexdigest(tool.encode() + b"\x00" + _stdlib_json(args))


@settings(max_examples=examples(400), deadline=None)
@given(_PLAIN)
def test_plain_arguments_keep_the_key_the_standard_encoder_gave(args):
    # Keys are stored in checkpoints and ledgers: a faster encoder must not change one.
    # The text covers control characters, lone surrogates and integers past 64 bits (which
    # orjson refuses and the standard encoder then takes).
    assert call_key("t", args) == _stdlib_key("t", args)
    assert canonical_json_bytes(args) == _stdlib_json(args)


@settings(max_examples=examples(200), deadline=None)
@given(st.recursive(_PLAIN | st.floats(allow_nan=False), lambda inner: st.lists(inner, max_size=3)))
def test_every_walk_that_remembers_containers_keys_as_the_unshared_data(value):
    # The walks that count a shared container again (`_FIRST_LOOK` set to 0, so every walk
    # is one) give the key the unshared data gets from a first look.
    args = {"a": value, "b": [value, {"c": value}]}
    expected = call_key("t", _unshared(args))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(keys, "_FIRST_LOOK", 0)
        assert call_key("t", args) == expected


@pytest.mark.parametrize(
    "args",
    [{"id": "P1002"}, {"q": "caf\u00e9 \u2028 \x00\x7f"}, {"n": 2**64}, {"s": "\ud800"}],
)
def test_known_keys_do_not_change(args):
    assert call_key("get_details_by_id", args) == _stdlib_key("get_details_by_id", args)
