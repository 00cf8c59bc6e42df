"""Tool results as ledger values every LangGraph store accepts, restored exactly on replay."""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import math
import re
import reprlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from langgraph.errors import GraphBubbleUp

from langgraph_replay_guard.replay.safe_decode import (
    ALLOWED_TYPES,
    Undecoded,
    refused,
    unpack_msgpack,
)

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

__all__ = [
    "CODEC_VERSION",
    "PREVIEW_CHARS",
    "allow_ledger_types",
    "decode_field",
    "decode_result",
    "decode_update",
    "encode_field",
    "encode_result",
]

logger = logging.getLogger("langgraph_replay_guard")

CODEC_VERSION = 2
"""Format of an encoded result. A value without `"codec"` is the original format (1)."""

PREVIEW_CHARS = 200
"""Length of the readable `<field>_preview` stored next to a tagged or dropped field."""

# What every shipped store reads back unchanged (checked against each store by experiment):
# SqliteStore writes with orjson, which refuses lone surrogates, non-str keys, ints outside
# [-2**63, 2**64) and JSON nested deeper than 255 levels, and turns NaN/inf into null;
# PostgresStore's jsonb refuses NUL, lone surrogates, NaN/inf, returns floats >= 1e16 as ints
# and -0.0 as 0.0.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_FLOAT_LIMIT = 1e16
_PLAIN_DEPTH = 64
_TREE_DEPTH = 40  # a tagged level nests up to 3 JSON levels; deeper goes into a "$json" string
_ENCODE_CHUNK = 1 << 20
_PACKED_KINDS = frozenset({"msgpack", "bytes", "bytearray", "null"})  # never pickle or json
_SURROGATE_ESCAPE = re.compile("ud[89a-f][0-9a-f]{2}")


class _UnencodableError(Exception):
    """A value neither the tagged form nor LangGraph's serializer can hold."""


# -- store-safe plain JSON ------------------------------------------------------------------------


def _safe_str(text: str) -> bool:
    """Whether every store keeps this string: no NUL, no surrogate code point."""
    return "\x00" not in text and not _has_surrogate(text)


def _has_surrogate(text: str) -> bool:
    if text.isascii():  # O(1) in CPython: the common case costs nothing
        return False
    try:
        # Strict UTF-8 refuses any surrogate; chunks bound the copy for huge strings.
        for start in range(0, len(text), _ENCODE_CHUNK):
            text[start : start + _ENCODE_CHUNK].encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _plain_float(number: float) -> bool:
    # False for NaN too (every comparison with NaN is false).
    if not -_FLOAT_LIMIT < number < _FLOAT_LIMIT:
        return False
    return number != 0.0 or math.copysign(1.0, number) > 0


def _plain_int(number: int) -> bool:
    return _INT_MIN <= number <= _INT_MAX


def _is_plain(value: Any, depth: int) -> bool:
    """Whether a value is JSON every store returns unchanged (exact types, no subclasses)."""
    kind = type(value)
    if kind is str:
        return _safe_str(value)
    if value is None or kind is bool:
        return True
    if kind is int:
        return _plain_int(value)
    if kind is float:
        return _plain_float(value)
    if depth >= _PLAIN_DEPTH:
        return False
    # Loops, not all(<generator>): a generator frame per container doubles the cost.
    if kind is list:
        for item in value:  # noqa: SIM110 (see above)
            if not _is_plain(item, depth + 1):
                return False
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not _safe_str(key) or not _is_plain(item, depth + 1):
                return False
        return True
    return False


# -- the tagged form ------------------------------------------------------------------------------
#
# A tagged field is JSON in which a one-key object whose key starts with a single "$" stands
# for a value JSON cannot hold ({"$bytes": "<base64>"}, {"$float": "nan"}, ...). Keys of plain
# dicts that start with "$" get one more "$", so no user dict is ever read as a tag.


def _escape(text: str) -> str:
    """A store-safe spelling of a string: backslash escapes for NUL and surrogates."""
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "\x00" in text:
        text = text.replace("\x00", "\\0")
    if text.isascii():
        return text
    # Strict UTF-8 fails only on surrogates; "backslashreplace" writes each as \udxxx.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _unescape(text: str) -> str:
    """Undo `_escape`, at C speed however many backslashes a huge string holds."""
    if "\\" not in text:
        return text
    if "\x00" in text:
        msg = "a $str holds a NUL"
        raise ValueError(msg)
    # Escaped backslashes first (left to right, as they were written); NUL marks them, since
    # an escaped text never holds one. What is left are the few NUL and surrogate escapes.
    parts = text.replace("\\\\", "\x00").split("\\")
    out = [_literal(parts[0])]
    for part in parts[1:]:
        if part[:1] == "0":
            out += ("\x00", _literal(part[1:]))
        elif _SURROGATE_ESCAPE.match(part):
            out += (chr(int(part[1:5], 16)), _literal(part[5:]))
        else:
            shown = "\\" + part[:7]
            msg = f"a $str holds an unknown escape {shown!r}"
            raise ValueError(msg)
    return "".join(out)


def _literal(marked: str) -> str:
    return marked.replace("\x00", "\\") if "\x00" in marked else marked


@functools.cache
def _serde() -> JsonPlusSerializer:
    # LangGraph's checkpoint serializer: same types, same allowlist policy as the checkpoints.
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer()


# Types a ledger row may name to be rebuilt: LangGraph's strict allow-list plus what the
# application allowed. A row naming anything else is damaged: never imported nor called.
_allowed: frozenset[tuple[str, ...]] = ALLOWED_TYPES


def allow_ledger_types(*types: type) -> None:
    """Let the replay ledger keep and rebuild objects of these classes (process-wide).

    A ledger row is read back with an explicit allow-list (LangGraph's strict msgpack
    list: LangChain messages, `Command`, `Send`, datetimes, UUIDs...), so a row someone
    else wrote can never make the guard import or call anything. An object of another
    class (your pydantic model, dataclass...) is not stored as it is unless allowed here:
    the result's content is kept as text, an artifact is dropped (both logged).

    Args:
        types: The classes, each rebuilt by LangGraph's serializer as in a checkpoint.
    """
    global _allowed
    _allowed = _allowed | {(kind.__module__, kind.__name__) for kind in types}


def _unpack(data: bytes) -> tuple[Any, list[Undecoded]]:
    found: list[Undecoded] = []
    return unpack_msgpack(data, allowed=_allowed, found=found), found


def _pack(value: Any) -> list[str]:
    """An object the tagged form has no tag for, through LangGraph's serializer (base64)."""
    try:
        kind, data = _serde().dumps_typed(value)
    except GraphBubbleUp:
        raise
    except Exception as exc:
        msg = f"{type(value).__name__}: {exc}"
        raise _UnencodableError(msg) from exc
    if kind not in _PACKED_KINDS:
        msg = f"{type(value).__name__}: LangGraph's serializer chose the {kind!r} format"
        raise _UnencodableError(msg)
    if kind == "msgpack":
        # Store only what reads back: a type off the allow-list would be a damaged row.
        found = refused(data, allowed=_allowed)
        if found:
            msg = (
                f"{found[0].what} is not on the allow-list of types the ledger rebuilds "
                "(allow_ledger_types allows a class)"
            )
            raise _UnencodableError(msg)
    return [kind, base64.b64encode(data).decode("ascii")]


def _tree(value: Any, depth: int) -> Any:
    """The tagged form of a value (store-safe JSON)."""
    kind = type(value)
    if kind is str:
        return value if _safe_str(value) else {"$str": _escape(value)}
    if value is None or kind is bool:
        return value
    if kind is int:
        return value if _plain_int(value) else {"$int": hex(value)}
    if kind is float:
        return value if _plain_float(value) else {"$float": repr(value)}
    if kind is bytes or kind is bytearray:
        return {"$" + kind.__name__: base64.b64encode(value).decode("ascii")}
    if kind not in _CONTAINERS:
        return {"$obj": _pack(value)}
    if depth == _TREE_DEPTH:
        # SqliteStore refuses JSON nested past 255 levels: go on in a string of its own.
        text = json.dumps(_tree(value, depth + 1), ensure_ascii=False, allow_nan=False)
        return {"$json": text}
    if kind is list:
        return _tree_items(value, depth)
    if kind is dict:
        return _tree_dict(value, depth)
    return {"$" + kind.__name__: _tree_items(value, depth)}


def _tree_items(items: Any, depth: int) -> list[Any]:
    out = []
    for item in items:
        out.append(_tree(item, depth + 1))
    return out


def _tree_dict(value: dict[Any, Any], depth: int) -> dict[str, Any]:
    if all(type(key) is str and _safe_str(key) for key in value):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out["$" + key if key.startswith("$") else key] = _tree(item, depth + 1)
        return out
    pairs = []
    for key, item in value.items():
        pairs.append([_tree(key, depth + 1), _tree(item, depth + 1)])
    return {"$dict": pairs}


_CONTAINERS = frozenset({list, dict, tuple, set, frozenset})


def _untree(node: Any) -> Any:
    """The value a tagged form stands for."""
    kind = type(node)
    if kind is list:
        return [_untree(item) for item in node]
    if kind is not dict:
        return node
    if len(node) == 1:
        ((key, inner),) = node.items()
        if key.startswith("$") and not key.startswith("$$"):
            return _untag(key, inner)
    out = {}
    for key, item in node.items():
        if key.startswith("$"):
            if not key.startswith("$$"):
                msg = f"the object key {key[:40]!r} is neither a tag nor an escaped key"
                raise ValueError(msg)
            key = key[1:]
        out[key] = _untree(item)
    return out


def _untag(tag: str, inner: Any) -> Any:
    reader = _READERS.get(tag)
    if reader is None:
        msg = f"unknown tag {tag[:40]!r}"
        raise ValueError(msg)
    return reader(inner)


def _text(inner: Any, tag: str) -> str:
    if type(inner) is not str:
        msg = f"{tag} holds a {type(inner).__name__}, not a string"
        raise ValueError(msg)
    return inner


def _items(inner: Any, tag: str) -> list[Any]:
    if type(inner) is not list:
        msg = f"{tag} holds a {type(inner).__name__}, not a list"
        raise ValueError(msg)
    return [_untree(item) for item in inner]


def _b64(inner: Any, tag: str) -> bytes:
    return base64.b64decode(_text(inner, tag), validate=True)


def _read_dict(inner: Any) -> dict[Any, Any]:
    out = {}
    for pair in _items(inner, "$dict"):
        if type(pair) is not list or len(pair) != 2:
            msg = "$dict holds an entry that is not a [key, value] pair"
            raise ValueError(msg)
        out[pair[0]] = pair[1]
    return out


def _read_packed(inner: Any) -> Any:
    if type(inner) is not list or len(inner) != 2 or inner[0] not in _PACKED_KINDS:
        msg = "$obj must be [format, base64] with format one of " + ", ".join(sorted(_PACKED_KINDS))
        raise ValueError(msg)
    data = _b64(inner[1], "$obj")
    if inner[0] != "msgpack":
        return _serde().loads_typed((inner[0], data))  # bytes, bytearray, null: no code
    value, found = _unpack(data)
    if found:
        # Never hand back a half-built value: the row is damaged (outcome unknown).
        msg = f"$obj names {found[0].what} ({found[0].reason})"
        raise ValueError(msg)
    return value


_READERS: dict[str, Callable[[Any], Any]] = {
    "$str": lambda inner: _unescape(_text(inner, "$str")),
    "$int": lambda inner: int(_text(inner, "$int"), 16),
    "$float": lambda inner: float(_text(inner, "$float")),
    "$bytes": lambda inner: _b64(inner, "$bytes"),
    "$bytearray": lambda inner: bytearray(_b64(inner, "$bytearray")),
    "$tuple": lambda inner: tuple(_items(inner, "$tuple")),
    "$set": lambda inner: set(_items(inner, "$set")),
    "$frozenset": lambda inner: frozenset(_items(inner, "$frozenset")),
    "$dict": _read_dict,
    "$json": lambda inner: _untree(json.loads(_text(inner, "$json"))),
    "$obj": _read_packed,
}


# -- previews -------------------------------------------------------------------------------------

_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 120
_REPR.maxlevel = 4


def _preview(value: Any) -> str:
    """A short readable, store-safe text for people reading a ledger row."""
    try:
        if type(value) is str:
            text = value[:PREVIEW_CHARS]
        elif isinstance(value, bytes | bytearray):
            text = repr(value[:PREVIEW_CHARS])  # repr of the whole could be huge
        else:
            text = _REPR.repr(value)
    except Exception:  # a broken __repr__ must not cost the result
        text = f"<{type(value).__name__}>"
    text = text[:PREVIEW_CHARS].replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _as_text(value: Any) -> str:
    """Content as text when it cannot be kept as it is (the model must still see it)."""
    for show in (str, repr):
        try:
            return show(value)
        except Exception:  # a broken __str__ falls back to __repr__
            continue
    return f"<{type(value).__name__} that cannot be shown>"


# -- the codec ------------------------------------------------------------------------------------


def _put_field(value: dict[str, Any], name: str, field: Any) -> None:
    """Store a field as plain JSON, or tagged with a preview; `_UnencodableError` otherwise."""
    try:
        if type(field) is str:  # one scan of a huge string, not two
            if _safe_str(field):
                value[name] = field
                return
            tree: Any = {"$str": _escape(field)}
        elif _is_plain(field, 0):
            value[name] = field
            return
        else:
            tree = _tree(field, 0)
    except (GraphBubbleUp, _UnencodableError):
        raise
    except RecursionError as exc:
        msg = f"{type(field).__name__} is nested too deeply (or holds itself)"
        raise _UnencodableError(msg) from exc
    except Exception as exc:  # e.g. a set whose members fail to hash: keep the content anyway
        msg = f"{type(field).__name__}: {type(exc).__name__}: {exc}"
        raise _UnencodableError(msg) from exc
    value[f"{name}_enc"] = tree
    value[f"{name}_preview"] = _preview(field)


def encode_result(
    content: Any, artifact: Any, status: str, *, update: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A tool call's outcome as a ledger value every shipped LangGraph store accepts.

    The value is plain JSON (str keys, finite numbers, no NUL or lone surrogate in any
    string). Content and artifact that are already such JSON are kept as they are, readable
    (`"content"`, `"artifact"`); anything else (NUL, surrogates, NaN, bytes, int keys, tuples,
    datetimes, pydantic models...) is kept losslessly in a tagged form (`"content_enc"`,
    `"artifact_enc"`) next to a short readable `"<field>_preview"`. An artifact nothing can
    hold is dropped (`"artifact_dropped"`: its type, `"artifact_error"`: why) and logged;
    content nothing can hold is kept as its text (`"content_lossy"`: its type).

    Args:
        content: The ToolMessage content (a string or a list of content blocks).
        artifact: The ToolMessage artifact, or None.
        status: The ToolMessage status (`"success"` or `"error"`).
        update: The whole state update of a tool that returned a `Command` (its messages
            included), kept losslessly like the artifact (`"update"`/`"update_enc"`).

    Returns:
        The value to store; `decode_result` restores `(content, artifact, status)` and
        `decode_update` the update.

    Raises:
        ValueError: An update that cannot be stored (replaying the call without it would
            lose the state it wrote); the message names the field.
    """
    if update is not None:
        with_update = encode_result(content, artifact, status)
        try:
            _put_field(with_update, "update", dict(update))
        except _UnencodableError as exc:
            msg = (
                f"the tool's Command update (keys {sorted(map(str, update))}) cannot be stored "
                f"in the replay ledger ({exc}); return plain data (or LangChain messages) in it"
            )
            raise ValueError(msg) from exc
        return with_update
    if (
        type(content) is str
        and artifact is None
        and type(status) is str
        and _safe_str(content)
        and _safe_str(status)
    ):
        return {"codec": CODEC_VERSION, "status": status, "content": content}  # the usual case
    value: dict[str, Any] = {"codec": CODEC_VERSION}
    _put_status(value, status)
    _put_content(value, content)
    if artifact is not None:
        _put_artifact(value, artifact)
    return value


def _put_status(value: dict[str, Any], status: Any) -> None:
    if not isinstance(status, str):
        status = _as_text(status)
    _put_field(value, "status", str(status))  # a str subclass is stored as its text


def _put_content(value: dict[str, Any], content: Any) -> None:
    kept = "the ledger keeps its text, so a replay returns that text"
    if _put_or_warn(value, "content", content, " as it is", kept) is not None:
        value["content_lossy"] = type(content).__name__
        _put_field(value, "content", _as_text(content))


def _put_artifact(value: dict[str, Any], artifact: Any) -> None:
    kept = "the ledger keeps its content only, so a replay returns no artifact"
    error = _put_or_warn(value, "artifact", artifact, "", kept)
    if error is not None:
        value["artifact_dropped"] = type(artifact).__name__
        value["artifact_error"] = _preview(str(error))
        value["artifact_preview"] = _preview(artifact)


def _put_or_warn(
    value: dict[str, Any], name: str, field: Any, how: str, kept: str
) -> _UnencodableError | None:
    """`_put_field`; a field it cannot store is logged with what the ledger `kept` instead.

    Returns:
        Why the field could not be stored (the caller stores what it keeps), or None.
    """
    try:
        _put_field(value, name, field)
    except _UnencodableError as exc:
        logger.warning(
            "langgraph-replay-guard: the tool's %s (%s) cannot be stored%s (%s); %s",
            name,
            type(field).__name__,
            how,
            exc,
            kept,
        )
        return exc
    return None


def encode_field(value: dict[str, Any], name: str, field: Any) -> None:
    """Put any value into a ledger row under `name`, in a form every shipped store accepts.

    Plain JSON stays as it is (`name`); anything else (a set, a tuple, bytes, a datetime, a
    pydantic model, NaN, a lone surrogate...) is kept losslessly in the tagged form
    (`<name>_enc`) next to a readable `<name>_preview`, as results are. A value nothing can
    hold keeps its preview and its type (`<name>_dropped`): a row is never refused for it.

    Args:
        value: The row being built; changed in place.
        name: The field's name (`"args"`).
        field: The value to store.
    """
    try:
        _put_field(value, name, field)
    except _UnencodableError:
        value[f"{name}_dropped"] = type(field).__name__
        value[f"{name}_preview"] = _preview(field)


def decode_field(value: Mapping[str, Any], name: str) -> Any:
    """The value `encode_field` stored under `name`; None when there is none.

    Never raises for a damaged field: it is informational, so its preview stands in.

    Args:
        value: A stored row.
        name: The field's name.

    Returns:
        The value, its preview text when it could not be kept or read back, or None.
    """
    if name in value:
        return value[name]
    encoded = value.get(f"{name}_enc")
    if encoded is not None:
        try:
            return _untree(encoded)
        except GraphBubbleUp:
            raise
        except Exception:  # a damaged informational field: its preview stands in
            logger.warning("langgraph-replay-guard: a ledger row's %r could not be read", name)
    return value.get(f"{name}_preview")


def decode_result(value: Mapping[str, Any]) -> tuple[Any, Any, str]:
    """The `(content, artifact, status)` an `encode_result` value (or an older row) holds.

    Args:
        value: A stored result: `encode_result`'s value, or the original format
            (`{"content", "status", "artifact"?, "artifact_dropped"?}`).

    Returns:
        Content, artifact (None when there was none or it was dropped) and status.

    Raises:
        ValueError: The value is not a recorded result (a corrupt row, or one written by a
            newer langgraph-replay-guard); the message names the problem.
    """
    if type(value) is not dict and not isinstance(value, Mapping):  # ABC checks are slow
        _corrupt(f"it is a {type(value).__name__}, not a mapping")
    if "codec" not in value:
        return _decode_v1(value)
    codec = value["codec"]
    if type(codec) is not int or codec != CODEC_VERSION:
        _corrupt(
            f"its format 'codec' is {str(codec)[:20]!r}, this version reads 1 and "
            f"{CODEC_VERSION}; upgrade langgraph-replay-guard if a newer one wrote it"
        )
    status = _field(value, "status", "status_enc", required=True)
    if type(status) is not str:
        _corrupt(f"its status is a {type(status).__name__}, not a string")
    content = _field(value, "content", "content_enc", required=True)
    return content, _field(value, "artifact", "artifact_enc"), status


def decode_update(value: Mapping[str, Any]) -> dict[str, Any] | None:
    """The state update an `encode_result(..., update=...)` value holds, or None.

    Args:
        value: A stored result.

    Returns:
        The update, or None when the call returned a plain message.

    Raises:
        ValueError: The stored update is damaged.
    """
    if not isinstance(value, Mapping) or ("update" not in value and "update_enc" not in value):
        return None
    update = _field(value, "update", "update_enc")
    if not isinstance(update, dict):
        _corrupt(f"its update is a {type(update).__name__}, not a mapping")
    return update


def _decode_v1(value: Mapping[str, Any]) -> tuple[Any, Any, str]:
    status = value.get("status")
    if not isinstance(status, str):
        _corrupt("its 'status' is missing or not a string")
    if "content" not in value:
        _corrupt("it has no 'content'")
    return value["content"], value.get("artifact"), status


def _field(value: Mapping[str, Any], name: str, encoded: str, *, required: bool = False) -> Any:
    if name in value:
        return value[name]
    if encoded not in value:
        if required:
            _corrupt(f"it has neither {name!r} nor {encoded!r}")
        return None
    try:
        return _untree(value[encoded])
    except RecursionError:
        _corrupt(f"{encoded!r} is nested too deeply")
    except (ValueError, TypeError, binascii.Error) as exc:
        _corrupt(f"{encoded!r} is malformed: {exc}")
    except Exception as exc:  # LangGraph's serializer can fail in many ways on bad bytes
        _corrupt(f"{encoded!r} could not be read back: {type(exc).__name__}: {exc}")


def _corrupt(problem: str) -> NoReturn:
    msg = (
        f"Cannot decode the recorded tool result: {problem}. The ledger row is corrupt (or "
        "from a newer langgraph-replay-guard); settle the call with `guard.resolve(...)`."
    )
    raise ValueError(msg)
