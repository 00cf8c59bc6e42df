"""Decoding LangGraph-serialized bytes with an allow-list: a file never names code to run."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import jsonplus

from langgraph_replay_guard._compat import (
    msgpack_safe_methods,
    msgpack_safe_types,
    strict_msgpack_ext_hook,
)

__all__ = [
    "ALLOWED_TYPES",
    "SafeSerializer",
    "Undecoded",
    "collect_undecoded",
    "refused",
    "unpack_msgpack",
]

ALLOWED_TYPES: frozenset[tuple[str, ...]] = msgpack_safe_types()
"""The (module, name) pairs a blob may name to be rebuilt: LangGraph's own strict list.

It holds what LangChain messages, LangGraph's `Command`/`Send`/`Interrupt`, store items and
the guard's own values need (datetimes, UUIDs, sets, paths, decimals...). Anything else is
never imported nor called: it decodes as an `Undecoded` value.
"""

# Extension codes of LangGraph's msgpack format (langgraph.checkpoint.serde.jsonplus).
_NAMED_CODES = frozenset(
    {
        jsonplus.EXT_CONSTRUCTOR_SINGLE_ARG,
        jsonplus.EXT_CONSTRUCTOR_POS_ARGS,
        jsonplus.EXT_CONSTRUCTOR_KW_ARGS,
        jsonplus.EXT_PYDANTIC_V1,
        jsonplus.EXT_PYDANTIC_V2,
    }
)
# These name no module: a numpy array (dtype and bytes, never an object array) and a
# delta snapshot (plain data); LangGraph's strict hook reads them.
_UNNAMED_CODES = frozenset({jsonplus.EXT_NUMPY_ARRAY, jsonplus.EXT_DELTA_SNAPSHOT})
_SHOWN = 80

_COLLECTOR: ContextVar[list[Undecoded] | None] = ContextVar(
    "langgraph_replay_guard_undecoded", default=None
)


@dataclass(frozen=True)
class Undecoded:
    """A value a blob holds but that was not rebuilt: its type is not on the allow-list.

    Attributes:
        what: What the blob named (`"os.system"`, `"a pickle blob"`...).
        reason: Why it was not decoded.
    """

    what: str
    reason: str

    def __str__(self) -> str:
        return f"<not decoded: {self.what}: {self.reason}>"

    __repr__ = __str__


@contextlib.contextmanager
def collect_undecoded() -> Iterator[list[Undecoded]]:
    """Collect every `Undecoded` value made while the block runs (in this context).

    Yields:
        The list the values are appended to, e.g. for a command's exit status.
    """
    found: list[Undecoded] = []
    token = _COLLECTOR.set(found)
    try:
        yield found
    finally:
        _COLLECTOR.reset(token)


def _note(value: Undecoded, found: list[Undecoded] | None) -> Undecoded:
    if found is not None:
        found.append(value)
    collector = _COLLECTOR.get()
    if collector is not None and collector is not found:
        collector.append(value)
    return value


def _shown(text: Any) -> str:
    return str(text)[:_SHOWN].encode("utf-8", "backslashreplace").decode("utf-8")


def _refusal(
    code: int, tup: Any, allowed: frozenset[tuple[str, ...]], methods: frozenset[Any]
) -> Undecoded | None:
    """Why an extension's unpacked payload must not be rebuilt (None: it may be).

    Only a name off the allow-list is refused. A malformed payload or an unknown code
    names nothing importable: LangGraph's strict hook reads it as data (or None).
    """
    if code not in _NAMED_CODES and code != jsonplus.EXT_METHOD_SINGLE_ARG:
        return None
    if type(tup) is not list or len(tup) < 3 or not all(type(t) is str for t in tup[:2]):
        return None
    name = f"{_shown(tup[0])}.{_shown(tup[1])}"
    if code == jsonplus.EXT_METHOD_SINGLE_ARG:
        method = tup[3] if len(tup) > 3 else None
        if (tup[0], tup[1], method) not in methods:
            return Undecoded(name, f"the method {_shown(method)!r} is not on the allow-list")
        return None
    if (tup[0], tup[1]) not in allowed:
        return Undecoded(name, "not on the allow-list, never imported")
    return None


def _scan(
    data: bytes, allowed: frozenset[tuple[str, ...]], methods: frozenset[Any]
) -> list[Undecoded]:
    """Every extension in the bytes, at any depth, that must not be rebuilt (builds nothing)."""
    refused: list[Undecoded] = []

    def hook(code: int, payload: bytes) -> None:
        if code == jsonplus.EXT_NUMPY_ARRAY:
            return  # names no module: LangGraph reads dtype and bytes (never objects)
        try:
            tup = ormsgpack.unpackb(payload, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except Exception:  # bytes no writer made name nothing: LangGraph reads them as None
            return
        if code != jsonplus.EXT_DELTA_SNAPSHOT:
            refusal = _refusal(code, tup, allowed, methods)
            if refusal is not None:
                refused.append(refusal)

    ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
    return refused


def refused(data: bytes, *, allowed: Iterable[tuple[str, ...]] = ALLOWED_TYPES) -> list[Undecoded]:
    """What LangGraph msgpack bytes name, at any depth, that the allow-list refuses.

    Builds nothing (for a writer checking that what it stores reads back).

    Args:
        data: The bytes.
        allowed: The (module, name) pairs that may be rebuilt.

    Returns:
        One `Undecoded` per refused extension (empty: the bytes read back as written).
    """
    return _scan(data, frozenset(allowed), msgpack_safe_methods())


def _opaque_hook(
    allowed: frozenset[tuple[str, ...]], methods: frozenset[Any]
) -> Callable[[int, bytes], Any]:
    """An ext hook that rebuilds allowed types and stands `Undecoded` for the others."""
    strict = strict_msgpack_ext_hook(allowed)

    def hook(code: int, data: bytes) -> Any:
        if code in _UNNAMED_CODES:
            return strict(code, data)
        try:
            tup = ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except Exception:
            return strict(code, data)  # unreadable: names nothing (LangGraph gives None)
        refusal = _refusal(code, tup, allowed, methods)
        # Allowed: LangGraph's strict hook rebuilds it; a refused type nested inside it comes
        # back as its raw payload (never imported), and the scan has reported it.
        return refusal if refusal is not None else strict(code, data)

    return hook


def unpack_msgpack(
    data: bytes,
    *,
    allowed: Iterable[tuple[str, ...]] = ALLOWED_TYPES,
    found: list[Undecoded] | None = None,
) -> Any:
    """Unpack LangGraph msgpack bytes, rebuilding only allowed types.

    A type outside the list, at any depth, is never imported nor called: it is appended to
    `found` and to the list of any enclosing `collect_undecoded`, and the value holds an
    `Undecoded` in its place (or, nested inside an allowed type, its raw payload).

    Args:
        data: The bytes (a checkpoint blob, a ledger row's `$obj`).
        allowed: The (module, name) pairs that may be rebuilt.
        found: Where to append the values not decoded.

    Returns:
        The value.

    Raises:
        ormsgpack.MsgpackDecodeError: The bytes are not msgpack.
    """
    allowed = frozenset(allowed)
    methods = msgpack_safe_methods()
    # First look, building nothing; then build with LangGraph's strict hook.
    refused = _scan(data, allowed, methods)
    if not refused:
        return ormsgpack.unpackb(
            data, ext_hook=strict_msgpack_ext_hook(allowed), option=ormsgpack.OPT_NON_STR_KEYS
        )
    for value in refused:
        _note(value, found)
    hook = _opaque_hook(allowed, methods)
    return ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)


class SafeSerializer(jsonplus.JsonPlusSerializer):
    """LangGraph's serializer, strict: for reading databases someone else wrote.

    Msgpack blobs rebuild only `ALLOWED_TYPES`; a JSON blob is read as plain JSON (no
    constructor is revived); a pickle blob (or any other format) is never unpickled. What
    is not decoded is an `Undecoded` value, also kept in `undecoded`.
    """

    def __init__(self, allowed: Iterable[tuple[str, ...]] = ALLOWED_TYPES) -> None:
        super().__init__(allowed_msgpack_modules=tuple(allowed))
        self.allowed = frozenset(allowed)
        self.undecoded: list[Undecoded] = []

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Decode a typed blob without importing or calling anything it names.

        Corrupt bytes raise as with LangGraph's serializer (the command reports them).
        """
        kind, raw = data
        if kind == "msgpack":
            return unpack_msgpack(raw, allowed=self.allowed, found=self.undecoded)
        if kind == "json":
            return json.loads(raw)
        if kind == "pickle":
            reason = "pickle is never decoded from a database (it could run code)"
            return _note(Undecoded("a pickle blob", reason), self.undecoded)
        return super().loads_typed(data)  # null, bytes, bytearray; an unknown format raises
