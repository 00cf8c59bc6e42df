"""The guard channel's earlier formats, made from a current value, for the format readers' tests."""

from __future__ import annotations

import copy
from typing import Any


def as_v2(value: dict[str, Any]) -> dict[str, Any]:
    """A current (format 3) channel value as format 2 stored it.

    Format 2 kept the batch in progress as `pending` (`{"batch", "events"}`), not in `log`.
    """
    v2 = copy.deepcopy(value)
    v2["v"] = 2
    log = v2.pop("log")
    v2["pending"] = {"batch": log[0]["b"], "events": log} if log else None
    return v2
