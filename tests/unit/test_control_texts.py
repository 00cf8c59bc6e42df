"""The control API records any result or failure a tool gives, however deep, big or shared."""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.decisions.control import error_text, result_text


def _deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def _shared(levels: int) -> list[Any]:
    value: list[Any] = [1]
    for _ in range(levels):
        value = [value, value]  # 2**levels paths to the same list: a plain repr never ends
    return value


class _Opaque:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"_Opaque({self.inner!r})"


HOSTILE = {
    "nested 10,000 deep": _deep(10_000),
    "an int of 5,000 digits": {"n": 10**5000},
    "shared 40 deep": _shared(40),
    "an object around a deep list": _Opaque(_deep(10_000)),
}


@pytest.mark.parametrize("value", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_result_or_failure_is_recorded_as_bounded_text(value):
    # Each raised (RecursionError, ValueError) or never ended in `repr` before.
    control = ReplayGuard(GuardConfig()).control()
    control.record_success("fetch", {"id": 1}, result=value)
    control.record_failure("fetch", {"id": 2}, value)
    control.record_failure("fetch", {"id": 3}, ValueError(value))
    control.record_failure("fetch", {"id": 4}, KeyError(value))  # `str` is the key's repr
    assert control.evaluate("fetch", {"id": 1}).reason == "duplicate"  # recorded as a success
    assert len(result_text(value) or "") <= 100_000
    assert len(error_text(value)) <= 100_000
    assert len(error_text(KeyError(value))) <= 100_000


def test_ordinary_values_read_as_before():
    assert result_text({"b": 2, "a": [1, "x"]}) == '{"a":[1,"x"],"b":2}'
    assert result_text(_Opaque(3)) == "_Opaque(3)"
    assert error_text("card declined") == "card declined"
    assert error_text(ValueError("card declined")) == "card declined"
    assert error_text(["bad", 1]) == "['bad', 1]"
    for error in (KeyError("sku"), KeyError(3), KeyError(), KeyError("a", 1), OSError(2, "gone")):
        assert error_text(error) == str(error)
