"""Tool results the stores cannot hold as they are, and exact comparison, for the codec tests."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from hypothesis import strategies as st

SURROGATE_TEXT = "half a pair \ud83d, a low one \udc80, a pair split in two \ud83d\ude00"

CASES: dict[str, tuple[Any, Any, str]] = {
    # A shell tool's output can hold NUL (`cat` of a binary file, `find -print0`).
    "nul_in_content": ("line one\x00line two\x00", None, "success"),
    "surrogates": (SURROGATE_TEXT, {"path": "caf\udce9.txt", "names": ["\udfff"]}, "success"),
    "nan_inf": ("stats", {"mean": math.nan, "max": math.inf, "min": -math.inf}, "success"),
    "int_keys": ("by id", {1: "one", 2: {3: "three"}, "4": "four"}, "success"),
    "bytes": ("image", b"\x89PNG\r\n\x1a\n\x00\x00\xff", "success"),
    "nested_mix": (
        [{"type": "text", "text": "ok\x00"}, {"type": "text", "text": "caf\udce9"}],
        {
            "raw": [b"\x00", bytearray(b"\xff"), (1, (2, "t\x00"))],
            "floats": [math.nan, -0.0, 1e20, 1.5e308, 0.1],
            "ints": [2**64, -(2**63) - 1, 10**40],
            "keys": {(1, "a"): {frozenset({1, 2})}, None: True, 2.5: [None]},
            "$looks_like_a_tag": {"$str": "not one"},
            "when": dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.UTC),
        },
        "error",
    ),
    "content_blocks": (
        [
            {"type": "text", "text": "first"},
            {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"},
            "a bare string block",
        ],
        None,
        "success",
    ),
}


def same(left: Any, right: Any) -> bool:
    """Equal and of the same types all the way down (NaN equals NaN, -0.0 is not 0.0)."""
    if type(left) is not type(right):
        return False
    if isinstance(left, float):
        if math.isnan(left) or math.isnan(right):
            return math.isnan(left) and math.isnan(right)
        return left == right and math.copysign(1.0, left) == math.copysign(1.0, right)
    if isinstance(left, list | tuple):
        return len(left) == len(right) and all(map(same, left, right))
    if isinstance(left, dict):
        if len(left) != len(right):
            return False
        return all(key in right and same(item, right[key]) for key, item in left.items())
    return bool(left == right)


def assert_store_safe(value: Any, depth: int = 0) -> None:
    """Fail unless the value is JSON every shipped store returns unchanged."""
    assert depth < 200, "nested too deeply for SqliteStore's JSON library"
    if isinstance(value, str):
        assert "\x00" not in value, "NUL in a string (PostgreSQL refuses it)"
        assert not any("\ud800" <= ch <= "\udfff" for ch in value), "surrogate in a string"
    elif isinstance(value, bool) or value is None:
        pass
    elif isinstance(value, int):
        assert type(value) is int
        assert -(2**63) <= value < 2**64, "int out of SqliteStore's range"
    elif isinstance(value, float):
        assert type(value) is float
        assert math.isfinite(value), "NaN or inf (not JSON)"
        assert abs(value) < 1e16, "PostgreSQL returns this float as an int"
        assert value != 0 or math.copysign(1.0, value) > 0, "PostgreSQL drops the sign of -0.0"
    elif isinstance(value, list):
        assert type(value) is list
        for item in value:
            assert_store_safe(item, depth + 1)
    else:
        assert type(value) is dict, f"{type(value).__name__} is not JSON"
        for key, item in value.items():
            assert type(key) is str, f"non-str key {key!r}"
            assert_store_safe(key, depth + 1)
            assert_store_safe(item, depth + 1)


# Every character (NUL, lone surrogates included), every float, ints of any size.
any_text = st.text(st.characters(codec=None, categories=None), max_size=20)
any_scalar = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats()
    | any_text
    | st.binary(max_size=10)
)
# NaN is left out of set members and keys: two NaNs never find each other in a set.
hashable_scalar = (
    st.none()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | any_text
    | st.binary(max_size=10)
)
hashable = st.recursive(hashable_scalar, lambda inner: st.tuples(inner, inner), max_leaves=4)
any_value = st.recursive(
    any_scalar,
    lambda children: (
        st.lists(children, max_size=4)
        | st.tuples(children, children)
        | st.dictionaries(any_text, children, max_size=4)
        | st.dictionaries(hashable, children, max_size=3)
        | st.frozensets(hashable, max_size=3)
    ),
    max_leaves=25,
)
