"""The replay class of a call: how it may be repeated (`ReplayClass`, `CallClass`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CallClass", "ReplayClass"]

ReplayClass = Literal["pure", "idempotent", "unsafe"]
"""How a tool may be repeated.

- `"pure"`: read-only or deterministic; identical calls can be deduplicated.
- `"idempotent"`: has a side effect that is safe to repeat with the same idempotency key.
- `"unsafe"`: has a side effect that must never run twice by accident.
"""


# A volatile call with a side effect ranks as its replay class: volatile only changes how its
# repeats are counted, not what it may do.
_RANKS = {
    ("pure", False): 0,
    ("pure", True): 1,
    ("idempotent", False): 2,
    ("idempotent", True): 2,
    ("unsafe", False): 3,
    ("unsafe", True): 3,
}


@dataclass(frozen=True, slots=True)
class CallClass:
    """The replay class of one call, as a classification gives it.

    Attributes:
        replay: `"pure"`, `"idempotent"` or `"unsafe"` (see `ReplayClass`).
        volatile: What the call reads or acts on is state its arguments do not name (a
            clock, a process, the file open in an editor's viewer): the same call may
            return or do something else each time. Never deduplicated, still counted,
            its count starting over when its result changes (see `ToolPolicy.volatile`).
        background: The call starts work that outlives it (a shell's `cmd &`, `nohup`,
            `setsid`, `disown`): a job that may keep writing after the call returned, so
            reads after it in the same thread (or turn) are no longer deduplicated.

    Raises:
        ValueError: On an unknown replay class.
    """

    replay: ReplayClass
    volatile: bool = False
    background: bool = False

    def __post_init__(self) -> None:
        if (self.replay, self.volatile) not in _RANKS:
            msg = (
                f"CallClass(replay={self.replay!r}): the replay class must be 'pure', "
                "'idempotent' or 'unsafe'."
            )
            raise ValueError(msg)

    @property
    def rank(self) -> int:
        """How much the call may change the world: 0 pure, 1 volatile, 2 idempotent, 3 unsafe.

        A chain of commands gets the class of its highest-ranked part.
        """
        return _RANKS[(self.replay, self.volatile)]
