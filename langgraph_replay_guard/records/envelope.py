"""The envelope hash: what identifies a recorded request, routing and tracing left out."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from langgraph_replay_guard.decisions.keys import sha256_json
from langgraph_replay_guard.errors import ReplayGuardError

__all__ = [
    "ENVELOPE_HASH_ALGORITHMS",
    "ENVELOPE_ROUTING_FIELDS",
    "EnvelopeHashFormatError",
    "compute_envelope_hash",
    "envelope_hash_digest",
    "envelope_hash_matches",
    "envelope_hash_of",
]

ENVELOPE_HASH_ALGORITHMS: tuple[str, ...] = ("sha256",)
"""Hash algorithms an `envelopeHash` may name in its prefix (`"sha256:..."`)."""

_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")

ENVELOPE_ROUTING_FIELDS: frozenset[str] = frozenset(
    {
        "callbacks",
        "checkpoint_id",
        "checkpoint_map",
        "checkpoint_ns",
        "max_concurrency",
        "metadata",
        "parent_run_id",
        "run_id",
        "run_name",
        "tags",
        "task_id",
        "thread_id",
    }
)
"""Fields left out of the envelope hash: they route or trace a run, they do not decide it.

They are dropped at the top of the envelope, from `envelope["config"]` and from
`envelope["config"]["configurable"]`, where keys starting with `__` (LangGraph's internal
plumbing) are dropped too. So the same request sent on another thread, with another run
id or other tracing callbacks, has the same hash.
"""


def _without_routing(envelope: Mapping[str, Any]) -> dict[str, Any]:
    clean = {k: v for k, v in envelope.items() if k not in ENVELOPE_ROUTING_FIELDS}
    config = clean.get("config")
    if isinstance(config, Mapping):
        config = {k: v for k, v in config.items() if k not in ENVELOPE_ROUTING_FIELDS}
        configurable = config.get("configurable")
        if isinstance(configurable, Mapping):
            config["configurable"] = {
                k: v
                for k, v in configurable.items()
                if k not in ENVELOPE_ROUTING_FIELDS and not str(k).startswith("__")
            }
        clean["config"] = config
    return clean


def compute_envelope_hash(envelope: Mapping[str, Any]) -> str:
    """Hash an envelope: `"sha256:" + hex digest` of its canonical JSON.

    Routing fields (`ENVELOPE_ROUTING_FIELDS`: run and thread ids, checkpoint ids,
    callbacks, tags, metadata...) are left out, so they never make two identical
    requests look different. Canonical JSON sorts keys and hashes `1` and `1.0` equal
    (see `keys.canonicalize`).

    Args:
        envelope: The request: usually `{"graph", "input", "config", ...}` as the recorder
            builds it.

    Returns:
        The hash, e.g. `"sha256:9f86d0..."`.

    Raises:
        InvalidArgumentsError: If the envelope holds values with no canonical JSON form.
    """
    return sha256_json(_without_routing(envelope))


class EnvelopeHashFormatError(ReplayGuardError, ValueError):
    """A recorded `envelopeHash` that is not a SHA-256 hex digest, or names another algorithm.

    Attributes:
        value: The recorded `envelopeHash`.
    """

    def __init__(self, message: str, *, value: str) -> None:
        super().__init__(message)
        self.value = value


def envelope_hash_digest(recorded: str) -> str:
    """The hex digest of a recorded `envelopeHash`, its algorithm checked.

    Two forms are accepted: `"sha256:" + hex` (this package's records) and the bare hex digest
    (IntentusNet's records). A prefix naming another algorithm (`"md5:..."`) is refused.

    Args:
        recorded: The `envelopeHash` of a record.

    Returns:
        The 64 lowercase hex digits.

    Raises:
        EnvelopeHashFormatError: If the prefix names an algorithm other than `sha256`, or
            the digest is not 64 lowercase hex digits.
    """
    algorithm, sep, digest = recorded.rpartition(":")
    if sep and algorithm not in ENVELOPE_HASH_ALGORITHMS:
        accepted = ", ".join(repr(f"{name}:") for name in ENVELOPE_HASH_ALGORITHMS)
        msg = (
            f"envelopeHash {recorded!r} names the unknown hash algorithm {algorithm!r}; "
            f"accepted: a {accepted} prefix, or none (a bare SHA-256 hex digest)"
        )
        raise EnvelopeHashFormatError(msg, value=recorded)
    if not _HEX_DIGEST.match(digest):
        msg = (
            f"envelopeHash {recorded!r} is not a SHA-256 digest: 64 lowercase hex digits, "
            "with or without a 'sha256:' prefix"
        )
        raise EnvelopeHashFormatError(msg, value=recorded)
    return digest


def _whole_envelope_digest(envelope: Mapping[str, Any]) -> str | None:
    """SHA-256 of the whole envelope as IntentusNet hashes it (`stable_hash`), or None.

    IntentusNet keeps every field (its routing and tracing metadata included) and writes the
    JSON with Python's standard encoder: sorted keys, compact separators, ASCII only.
    """
    try:
        text = json.dumps(dict(envelope), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    except (TypeError, ValueError):  # not JSON data: it cannot be IntentusNet's envelope
        return None
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def envelope_hash_matches(envelope: Mapping[str, Any], recorded: str) -> bool:
    """Whether an envelope hashes to a recorded `envelopeHash`, in either accepted form.

    The digest (after its optional `sha256:` prefix) must be the SHA-256 of the envelope's
    canonical JSON, either without routing fields (`compute_envelope_hash`, what this
    package records) or of the whole envelope as IntentusNet's `stable_hash` writes it (its
    records hash everything, `metadata.traceId` included). Both cover every field that
    decides the result, so a changed input, intent or payload never matches.

    Args:
        envelope: The envelope (a record's, or the request being answered).
        recorded: The recorded `envelopeHash`.

    Returns:
        True when the envelope is the recorded one.

    Raises:
        EnvelopeHashFormatError: If `recorded` is malformed or names an unknown algorithm.
        InvalidArgumentsError: If the envelope is not IntentusNet's and holds values with no
            canonical JSON form.
    """
    digest = envelope_hash_digest(recorded)
    if _whole_envelope_digest(envelope) == digest:
        return True
    return compute_envelope_hash(envelope) == f"sha256:{digest}"


def envelope_hash_of(envelope: Mapping[str, Any], like: str) -> str:
    """An envelope's hash, written in the form of a recorded one (for messages).

    Args:
        envelope: The envelope.
        like: A recorded `envelopeHash`: with a `sha256:` prefix, the result is
            `compute_envelope_hash`; bare, the whole envelope's digest as IntentusNet
            writes it.

    Returns:
        The hash.

    Raises:
        InvalidArgumentsError: If the envelope has no canonical JSON form.
    """
    if not like.startswith("sha256:"):
        whole = _whole_envelope_digest(envelope)
        if whole is not None:
            return whole
    return compute_envelope_hash(envelope)
