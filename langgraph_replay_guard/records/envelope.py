"""The envelope hash: what identifies a recorded request, routing and tracing left out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph_replay_guard.decisions.keys import sha256_json

__all__ = ["ENVELOPE_ROUTING_FIELDS", "compute_envelope_hash"]

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
