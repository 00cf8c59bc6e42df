"""Canonical JSON of tool arguments, call keys and content hashes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import json
import math
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any, TypeAlias, cast

import orjson
import xxhash
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

from langgraph_replay_guard.errors import InvalidArgumentsError

__all__ = [
    "MAX_DEPTH",
    "MAX_NODES",
    "call_key",
    "canonical_json",
    "canonical_json_bytes",
    "canonicalize",
    "content_hash",
    "sha256_json",
]

MAX_DEPTH = 100
"""Deepest nesting accepted in arguments; deeper values are rejected, not recursed into."""

MAX_NODES = 1_000_000
"""Most values (scalars and containers) accepted in one argument tree."""

_JSON = int | float | str | bool | None | list[Any] | dict[str, Any]


_FIRST_LOOK = 10_000
"""Values a first walk takes before it starts again remembering the containers it walked.

Shared references can make a small object a huge tree (40 lists that each hold the next one
twice make 2**40 paths). A walk that remembers each container walked whole counts one met
again without walking it, and refuses such a tree at once instead of after `MAX_NODES`
values; remembering costs a little on every container, so only a walk past this many
values (rare, and slow anyway) starts again that way.
"""


class _LookAgain(Exception):
    """A first walk passed `_FIRST_LOOK` values: walk again, remembering containers."""


class _Walk:
    """One canonicalization pass: counts nodes and tracks containers on the current path.

    `done` (a second walk, see `_FIRST_LOOK`) keeps each container walked whole: (the
    container, how many levels below it hold a value that is not a JSON scalar, the values
    under it, its canonical form). The container itself is kept, so its id names it all walk
    long. `deepest` is the depth of the deepest value the walk of the current container has
    met that is not a JSON scalar (each one counts toward `MAX_DEPTH`).
    """

    __slots__ = ("deepest", "done", "limit", "nodes", "on_path")

    def __init__(self, *, remember: bool = False) -> None:
        self.nodes = 0
        self.on_path: set[int] = set()
        self.done: dict[int, tuple[Any, int, int, Any]] | None = {} if remember else None
        self.limit = MAX_NODES if remember else _FIRST_LOOK
        self.deepest = 0


def canonicalize(value: Any, *, root: str = "args") -> _JSON:
    """Turn a value into plain JSON data whose serialization is canonical.

    The canonical forms, chosen so that values a model or a checkpoint would consider
    equal hash equal:

    - `bool`, `None`, `str` as they are; integers as integers; a float with an integral value
      as that integer (`1.0` -> `1`, `-0.0` -> `0`); NaN and infinities stay floats, which
      the canonical text writes as the bare tokens `NaN`, `Infinity`, `-Infinity` (never
      quoted: a float NaN and the string `"NaN"` are different arguments, with different
      keys).
    - `Decimal`: integral values as integers, NaN and infinities as the floats above,
      others as their normalized string.
    - `datetime`: ISO 8601; timezone-aware values converted to UTC first. `date` and `time`:
      ISO 8601. `timedelta`: total seconds as a number.
    - `UUID`, `os.PathLike`: their string form. `Enum`: its value.
    - pydantic models: `model_dump(mode="json")`; dataclasses: a mapping of their fields.
    - `bytes`, `bytearray`, `memoryview`: `{"$bytes_sha256": <hex digest>}`.
    - lists and tuples as lists; sets and frozensets as lists sorted by canonical JSON.
    - mappings with `str` keys (integer keys become strings, as in JSON).

    Args:
        value: The value to canonicalize.
        root: Name used for the top of the value in error paths.

    Returns:
        JSON-compatible data (dicts, lists, str, int, float, bool, None). A container that
        `value` holds more than once may be one object in the result too.

    Raises:
        InvalidArgumentsError: For unsupported types, cyclic references, nesting deeper than
            `MAX_DEPTH` or more than `MAX_NODES` values. The message names the argument.
    """
    try:
        return _canon(value, root, 0, _Walk())
    except _LookAgain:
        return _canon(value, root, 0, _Walk(remember=True))


# Where a value is in the arguments: the root's name, or (its container's path, its key or
# index). The text (`args.items[3].when`) is built only for an error: building it for every
# value walked was most of the walk's time on large arguments (a million values, refused).
_Path: TypeAlias = str | tuple["_Path", str | int]


def _text(path: _Path) -> str:
    """The path's text: `.key` for a mapping's key, `[i]` for an index."""
    parts: list[str] = []
    while isinstance(path, tuple):
        path, step = path
        parts.append(f"[{step}]" if isinstance(step, int) else f".{step}")
    parts.append(path)
    return "".join(reversed(parts))


def _canon(value: Any, path: _Path, depth: int, walk: _Walk) -> _JSON:
    walk.nodes += 1
    if walk.nodes > walk.limit:
        if walk.done is None:
            raise _LookAgain
        raise _too_large(path, "")
    # Exact type checks first: they are the hot path for model-generated arguments.
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return value  # type: ignore[no-any-return]
    if kind is int:
        if not -_BIG_INT < value < _BIG_INT:
            raise _too_long(path, "is an integer", "pass it as a string instead")
        return value  # type: ignore[no-any-return]
    if kind is float:
        return _canon_float(value)
    if depth >= MAX_DEPTH:
        msg = (
            f"Argument '{_text(path)}' is nested more than {MAX_DEPTH} levels deep. "
            "Flatten the structure or pass a reference to it."
        )
        raise InvalidArgumentsError(msg, path=_text(path))
    # Any value that is not a JSON scalar counts toward the depth limit, so toward the levels
    # a container met again is checked with (`_walked`).
    if depth > walk.deepest:
        walk.deepest = depth
    # Exact dicts and lists before the `Mapping` check, which goes through the ABC machinery.
    if kind is dict:
        return _canon_container(value, path, depth, walk, _canon_mapping)
    if kind is list or kind is tuple:
        return _canon_container(value, path, depth, walk, _canon_sequence)
    if isinstance(value, Mapping):
        return _canon_container(value, path, depth, walk, _canon_mapping)
    if isinstance(value, list | tuple):
        return _canon_container(value, path, depth, walk, _canon_sequence)
    return _canon_other(value, path, depth, walk)


def _canon_float(value: float) -> int | float:
    if math.isnan(value):
        return math.nan  # one NaN: its sign and payload are not part of the value
    if math.isinf(value) or not value.is_integer():
        return value
    return int(value)


def _float_key(value: float) -> int | float | str:
    """A float mapping key: JSON keys are strings, so `{nan: 1}` keys like `{"NaN": 1}`.

    Kept as it always was (non-string keys are documented to hash like their JSON text).
    """
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return _canon_float(value)


def _enter(value: Any, path: _Path, walk: _Walk) -> int:
    ident = id(value)
    if ident in walk.on_path:
        msg = (
            f"Argument '{_text(path)}' contains a reference to itself (a cycle); "
            "it cannot be hashed."
        )
        raise InvalidArgumentsError(msg, path=_text(path))
    walk.on_path.add(ident)
    return ident


def _too_large(path: _Path, why: str) -> InvalidArgumentsError:
    """The refusal of arguments past `MAX_NODES`, at the value where the count passed it."""
    msg = (
        f"Argument '{_text(path)}' makes the tool-call arguments larger than "
        f"{MAX_NODES:,} values{why}. "
        "Pass a reference (an id, a path) instead of the data itself."
    )
    return InvalidArgumentsError(msg, path=_text(path))


def _too_long(path: _Path, what: str, fix: str) -> InvalidArgumentsError:
    """The refusal of an integer too long for JSON (4,000 digits and more), value or key."""
    msg = f"Argument '{_text(path)}' {what} with more than 4,000 digits; {fix}."
    return InvalidArgumentsError(msg, path=_text(path))


def _walked(
    value: Any, path: _Path, depth: int, walk: _Walk, done: dict[int, tuple[Any, int, int, Any]]
) -> Any:
    """The canonical form of a container walked whole already, if it fits at this depth.

    Its values count again, as a walk through them would (`MAX_NODES` counts paths). Where
    the containers it holds would pass `MAX_DEPTH` here, None: the walk goes through it
    again and reports the one too deep.
    """
    found = done.get(id(value))
    if found is None or found[0] is not value or depth + found[1] >= MAX_DEPTH:
        return None
    walk.nodes += found[2]
    walk.deepest = max(walk.deepest, depth + found[1])
    if walk.nodes > MAX_NODES:
        raise _too_large(path, " (it holds the same data many times over)")
    return found[3]


def _canon_container(
    value: Any,
    path: _Path,
    depth: int,
    walk: _Walk,
    build: Callable[[Any, _Path, int, _Walk], _JSON],
) -> _JSON:
    """A container's canonical form, made by `build` unless walked already.

    A container is a mapping, a sequence or a dataclass instance. A second walk (see
    `_FIRST_LOOK`) takes a container it walked whole from `walk.done` (`_walked`) and keeps
    each one it walks there.
    """
    done = walk.done
    if done is None:
        return build(value, path, depth, walk)
    walked = _walked(value, path, depth, walk, done)
    if walked is not None:
        return walked  # type: ignore[no-any-return]
    nodes, deepest = walk.nodes, walk.deepest
    walk.deepest = depth
    out = build(value, path, depth, walk)
    done[id(value)] = (value, walk.deepest - depth, walk.nodes - nodes, out)
    walk.deepest = max(walk.deepest, deepest)
    return out


def _canon_mapping(value: Mapping[Any, Any], path: _Path, depth: int, walk: _Walk) -> _JSON:
    ident = _enter(value, path, walk)
    out: dict[str, Any] = {}
    for raw_key, item in value.items():
        if isinstance(raw_key, str):
            key = raw_key
        elif isinstance(raw_key, bool) or raw_key is None:
            key = json.dumps(raw_key)
        elif isinstance(raw_key, int | float):
            if isinstance(raw_key, int) and not -_BIG_INT < raw_key < _BIG_INT:
                raise _too_long(path, "has an integer key", "use a string key instead")
            key = json.dumps(_float_key(raw_key) if isinstance(raw_key, float) else raw_key)
        else:
            msg = (
                f"Argument '{_text(path)}' has a key of type {type(raw_key).__name__!r}; "
                "only str, int, float, bool and None keys can be hashed."
            )
            raise InvalidArgumentsError(msg, path=_text(path))
        if key in out:
            msg = f"Argument '{_text(path)}' has two keys that both serialize to {key!r}."
            raise InvalidArgumentsError(msg, path=_text(path))
        out[key] = _canon(item, (path, key), depth + 1, walk)
    walk.on_path.discard(ident)
    return out


def _canon_sequence(value: Iterable[Any], path: _Path, depth: int, walk: _Walk) -> list[Any]:
    ident = _enter(value, path, walk)
    out = [_canon(item, (path, i), depth + 1, walk) for i, item in enumerate(value)]
    walk.on_path.discard(ident)
    return out


def _canon_other(value: Any, path: _Path, depth: int, walk: _Walk) -> _JSON:
    if isinstance(value, bool | int | str):  # subclasses, e.g. IntEnum members handled below
        if isinstance(value, enum.Enum):
            return _canon(value.value, path, depth + 1, walk)
        return bool(value) if isinstance(value, bool) else value
    if isinstance(value, float):
        return _canon_float(float(value))
    if isinstance(value, enum.Enum):
        return _canon(value.value, path, depth + 1, walk)
    if isinstance(value, Decimal):
        return _canon_decimal(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None and value.utcoffset() is not None:
            value = value.astimezone(dt.UTC)
        text: str = value.isoformat()
        return text
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return _canon_float(value.total_seconds())
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)  # type: ignore[no-any-return]
    if isinstance(value, bytes | bytearray | memoryview):
        return {"$bytes_sha256": hashlib.sha256(bytes(value)).hexdigest()}
    if isinstance(value, BaseModel):
        try:
            dumped = value.model_dump(mode="json")
        except PydanticSerializationError as exc:
            msg = (
                f"Argument '{_text(path)}' is a {type(value).__qualname__} that pydantic cannot "
                f"dump as JSON ({exc}). Give its fields JSON types or a serializer."
            )
            raise InvalidArgumentsError(msg, path=_text(path)) from exc
        return _canon(dumped, path, depth, walk)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _canon_container(value, path, depth, walk, _canon_dataclass)
    if isinstance(value, set | frozenset):
        items = _canon_container(value, path, depth, walk, _canon_sequence)
        return sorted(cast("list[Any]", items), key=_dumps)
    msg = (
        f"Argument '{_text(path)}' has type {type(value).__module__}.{type(value).__qualname__}, "
        "which has no canonical JSON form. Pass JSON data (str, number, bool, None, list, "
        "dict), a pydantic model or a dataclass instead."
    )
    raise InvalidArgumentsError(msg, path=_text(path))


def _canon_dataclass(value: Any, path: _Path, depth: int, walk: _Walk) -> _JSON:
    """A dataclass instance as the mapping of its fields."""
    ident = _enter(value, path, walk)
    fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    out = _canon_mapping(fields, path, depth, walk)
    walk.on_path.discard(ident)
    return out


def _canon_decimal(value: Decimal) -> int | float | str:
    if not value.is_finite():
        return math.nan if value.is_nan() else (math.inf if value > 0 else -math.inf)
    # Only modest exponents become ints: int(Decimal("1E+10000000")) would take forever.
    if value.adjusted() < _DECIMAL_INT_DIGITS and value == value.to_integral_value(context=_WIDE):
        return int(value)
    return str(value.normalize(context=_WIDE))


_WIDE = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_DECIMAL_INT_DIGITS = 300  # integral Decimals up to this many digits hash like ints
_BIG_INT = 10**4000  # Python refuses to turn ints of 4,300+ digits into text


# One shared encoder: json.dumps() with options builds a new encoder on every call. It writes
# non-finite floats as the bare tokens NaN, Infinity and -Infinity, which no string can
# produce (a string is always quoted): a float NaN and the string "NaN" never share a key.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True
)


def _dumps(value: Any) -> str:
    return _ENCODER.encode(value)


def _is_plain(value: Any, depth: int, budget: list[Any]) -> bool:
    """Whether `value` is JSON data that already serializes canonically.

    Plain means str keys and str/int/bool/None/list/dict values, no floats (they need
    `1.0 -> 1`), no int too long for JSON (over 4,000 digits), no deeper than `MAX_DEPTH`
    (which also stops at cycles) and no more than `MAX_NODES` values. Plain values skip the
    slower canonicalizing walk, which reports the problem otherwise: the C JSON encoder
    serializes them as they are.

    `budget` is [the values it may still walk, None or the plain containers walked whole,
    the deepest container met]: a list, not an object, as this runs for every call's
    arguments. A second walk (see `_FIRST_LOOK`) maps each such container's id to (the
    container, how many levels of containers it holds, the values under it): met again (a
    shared reference) where it fits under `MAX_DEPTH`, it is plain again and its values count
    again without a walk.
    """
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-_BIG_INT < value < _BIG_INT)
    if depth >= MAX_DEPTH or (kind is not dict and kind is not list):
        return False
    memo: dict[int, tuple[Any, int, int]] | None = budget[1]
    if memo is not None:
        walked = memo.get(id(value))
        if walked is not None and walked[0] is value and depth + walked[1] < MAX_DEPTH:
            budget[0] -= walked[2]
            budget[2] = max(budget[2], depth + walked[1])
            return bool(budget[0] >= 0)
        outer = budget[2]
        budget[2] = depth
    start = budget[0]
    budget[0] -= len(value)
    if budget[0] < 0:
        return False
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return False
            if type(item) is str:
                continue  # the usual argument, checked without a call
            if not _is_plain(item, depth + 1, budget):
                return False
    elif not all(_is_plain(item, depth + 1, budget) for item in value):
        return False
    if memo is not None:
        memo[id(value)] = (value, budget[2] - depth, start - budget[0])
        budget[2] = max(budget[2], outer)
    return True


def canonical_json(value: Any, *, root: str = "args") -> str:
    """Serialize a value as canonical JSON text.

    Sorted keys, no insignificant whitespace, UTF-8 text (non-ASCII characters are not escaped),
    and the canonical forms documented in `canonicalize`. NaN and infinities are written as
    the bare tokens `NaN`, `Infinity` and `-Infinity` (as Python's `json` module writes and
    reads them), so the text is strict JSON only for finite numbers.

    Args:
        value: The value to serialize.
        root: Name used for the top of the value in error paths.

    Returns:
        The canonical JSON text.

    Raises:
        InvalidArgumentsError: If the value cannot be canonicalized.
    """
    return canonical_json_bytes(value, root=root).decode("utf-8", "surrogatepass")


def canonical_json_bytes(value: Any, *, root: str = "args") -> bytes:
    """`canonical_json` as UTF-8 bytes (what the hashes take).

    Plain data goes through orjson, whose sorted compact output is byte for byte the
    standard encoder's on plain data (a property test holds them together) at a tenth of
    its cost; it refuses only lone surrogates and integers beyond 64 bits, which the
    standard encoder then takes.

    Args:
        value: The value to serialize.
        root: Name used for the top of the value in error paths.

    Returns:
        The canonical JSON text, UTF-8 encoded (lone surrogates kept, as `surrogatepass`).

    Raises:
        InvalidArgumentsError: If the value cannot be canonicalized.
    """
    # The budget counts the values inside containers; the top value is one more, as
    # `canonicalize` counts it.
    budget: list[Any] = [_FIRST_LOOK - 1, None, 0]
    plain = _is_plain(value, 0, budget)
    if not plain and budget[0] < 0:  # past the first look: again, remembering containers
        plain = _is_plain(value, 0, [MAX_NODES - 1, {}, 0])
    if plain:
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            text = _dumps(value)
    else:
        text = _dumps(canonicalize(value, root=root))
    return text.encode("utf-8", "surrogatepass")


def _drop_ignored(args: Any, ignore_args: Iterable[str]) -> Any:
    """Return `args` without the (possibly dotted) paths in `ignore_args`; never mutates."""
    if not isinstance(args, Mapping):
        return args
    trimmed: dict[Any, Any] = dict(args)
    for dotted in ignore_args:
        head, _, rest = dotted.partition(".")
        if head not in trimmed:
            continue
        if rest:
            trimmed[head] = _drop_ignored(trimmed[head], [rest])
        else:
            del trimmed[head]
    return trimmed


def call_key(name: str, args: Any, *, ignore_args: Iterable[str] = ()) -> str:
    """Compute the dedup key of a tool call.

    The key is the xxh3_128 hex digest of the tool name and the canonical JSON of its
    arguments, after dropping the `ignore_args` paths (`"request_id"`, `"meta.ts"`).

    Args:
        name: Tool name.
        args: Tool arguments (usually a dict; a plain string input is accepted too).
        ignore_args: Argument names, or dotted paths into nested dicts, to leave out.

    Returns:
        A 32-character lowercase hex string.

    Raises:
        InvalidArgumentsError: If the arguments cannot be canonicalized; the message names
            the tool and the argument.
    """
    if ignore_args:
        args = _drop_ignored(args, ignore_args)
    try:
        data = canonical_json_bytes(args)
    except InvalidArgumentsError as exc:
        msg = f"Tool '{name}': {exc}"
        raise InvalidArgumentsError(msg, path=exc.path) from None
    return xxhash.xxh3_128_hexdigest(name.encode("utf-8", "surrogatepass") + b"\x00" + data)


def content_hash(text: str) -> str:
    """Hash a tool result for result comparison (xxh3_128 hex digest of its UTF-8 bytes).

    Args:
        text: The result text.

    Returns:
        A 32-character lowercase hex string.
    """
    return xxhash.xxh3_128_hexdigest(text.encode("utf-8", "surrogatepass"))


def sha256_json(value: Any) -> str:
    """Return `"sha256:" + hex digest` of the canonical JSON of a value.

    Args:
        value: Any value `canonicalize` accepts.

    Returns:
        The prefixed SHA-256 hex digest.

    Raises:
        InvalidArgumentsError: If the value cannot be canonicalized.
    """
    digest = hashlib.sha256(canonical_json_bytes(value, root="value")).hexdigest()
    return f"sha256:{digest}"
