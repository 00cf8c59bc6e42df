"""Names of the notifications of ledger writes: a channel per namespace, a payload per row."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from typing import Any

__all__ = ["channel", "notes", "payload"]


@functools.lru_cache(maxsize=1024)  # every outcome names its channel: a few namespaces a process
def channel(namespace: tuple[str, ...]) -> str:
    """The `LISTEN` channel of a ledger namespace (a row's namespace without its last two parts).

    One channel per ledger namespace (`("replay_guard", "<tenant>")`), so a worker hears
    only its tenant's writes; hashed, since a channel name is an identifier of at most 63
    bytes.
    """
    text = ".".join(namespace[:-2])
    return "replay_guard_" + hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def payload(namespace: tuple[str, ...], key: str) -> str:
    """The notification payload naming one row (hashed: short, and no text of the call)."""
    text = ".".join(namespace) + "\x00" + key
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


def notes(puts: Iterable[tuple[tuple[str, ...], str, Any]]) -> list[tuple[str, str]]:
    """The `(channel, payload)` of each row a `Write` puts, once each."""
    return list(dict.fromkeys((channel(ns), payload(ns, key)) for ns, key, _ in puts))
