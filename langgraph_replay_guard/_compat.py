"""The one place that reads LangGraph's and LangChain's private internals."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["create_agent_middleware"]

# `create_agent` reads `m.name` of every middleware inside a comprehension (its own frame
# before Python 3.12), so the building call is at most a few frames up.
_MAX_FRAMES_UP = 4


def create_agent_middleware() -> list[Any] | None:
    """The middleware list of the `langchain.agents.create_agent` call running now, if any.

    Used to name the problem when two guard middlewares would collide, before LangChain's
    generic "Please remove duplicate middleware instances." Reads a local variable of
    `langchain.agents.factory.create_agent`; when LangChain renames it, this returns None and
    LangChain's own check still applies.
    """
    frame = sys._getframe(1)
    for _ in range(_MAX_FRAMES_UP + 1):
        frame_back = frame.f_back
        if frame_back is None:
            return None
        frame = frame_back
        code = frame.f_code
        if code.co_name == "create_agent" and frame.f_globals.get("__name__") == (
            "langchain.agents.factory"
        ):
            middleware = frame.f_locals.get("middleware")
            return list(middleware) if isinstance(middleware, (list, tuple)) else None
    return None
