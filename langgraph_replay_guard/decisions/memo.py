"""A small bounded memo keyed by an object's identity: what the guard knows about that object."""

from __future__ import annotations

import threading
from typing import Generic, TypeVar

__all__ = ["IdentityMemo"]

V = TypeVar("V")


class IdentityMemo(Generic[V]):
    """Remembers something about objects, by identity; the oldest entry goes past `cap`.

    Each entry holds its object, so the object's `id` cannot be reused by another one while
    the entry lives, and a recall checks it is the very same object. Used where a per-call
    path must know at once that it has met an object before: a channel value the reducer
    checked, a write the guard built.

    Args:
        cap: Most objects remembered.
    """

    __slots__ = ("_cap", "_entries", "_lock")

    def __init__(self, cap: int) -> None:
        """Create an empty memo."""
        self._cap = cap
        self._entries: dict[int, tuple[object, V]] = {}
        self._lock = threading.Lock()  # parallel tool calls remember at once

    def remember(self, obj: object, payload: V) -> None:
        """Remember `payload` for `obj` (replacing what was remembered for it).

        Args:
            obj: The object.
            payload: What to remember about it.
        """
        with self._lock:
            self._entries[id(obj)] = (obj, payload)
            if len(self._entries) > self._cap:
                del self._entries[next(iter(self._entries))]

    def recall(self, obj: object) -> V | None:
        """What was remembered for this very object, or None.

        Args:
            obj: The object.

        Returns:
            The payload, or None when `obj` is not remembered (or was evicted).
        """
        entry = self._entries.get(id(obj))
        if entry is None or entry[0] is not obj:
            return None
        return entry[1]
