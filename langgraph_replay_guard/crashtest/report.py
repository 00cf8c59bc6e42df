"""What a crash test found: one trial per tool call and crash point, and its verdict."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["POINTS", "CallSeen", "CrashReport", "Trial"]

POINTS: dict[str, str] = {
    "before_claim": "before the claim",
    "after_claim": "after the claim, before the tool",
    "after_tool": "after the tool, before its outcome is recorded",
    "after_outcome": "after the outcome, before the checkpoint",
}
"""The crash points, in the order a call passes them, with how the report names them."""

PURE_HINT = "declare it unsafe or idempotent if it has a side effect"


@dataclass(frozen=True)
class CallSeen:
    """A tool call of the learning run: the `ordinal`-th call of `tool` in the thread."""

    tool: str
    ordinal: int
    replay: str | None
    """Its replay class (`pure`, `idempotent`, `unsafe`), or None when no ledger saw it."""
    args: dict[str, Any]

    @property
    def label(self) -> str:
        """How the report names the call (`send_email #1`)."""
        return f"{self.tool} #{self.ordinal}"


@dataclass(frozen=True)
class Trial:
    """One crash at one point of one call, and the resume in a new process."""

    call: CallSeen
    point: str
    killed: bool
    """Whether the process died at the point (False: the call never reached it)."""
    starts: int
    """How many times the tool body started for the call, in both processes."""
    keys: tuple[str | None, ...]
    """The idempotency key the guard delivered at each start (None: none)."""
    resume: str
    """What the resume did: replayed, ran again, went on, ReplayUnsafeError, interrupt..."""
    error: str | None = None
    """Why the trial could not run as planned (a timeout, a child that failed)."""
    allowed_rerun: bool = False
    """The tool was named as one whose re-run is fine (a pure tool checked by its owner)."""

    @property
    def problem(self) -> str | None:
        """Why the trial fails, or None."""
        if self.error is not None:
            return self.error
        if self.starts < 2:
            return None
        replay = self.call.replay
        if replay == "idempotent" and None not in self.keys and len(set(self.keys)) == 1:
            return None  # the API deduplicates by the stable key: exactly once end to end
        if replay == "pure" or replay is None:
            if self.allowed_rerun:
                return None
            kind = "pure" if replay == "pure" else "not ledgered"
            return f"{kind}, ran {self.starts} times for one call: {PURE_HINT}"
        return f"{replay}, its body started {self.starts} times for one call without its stable key"

    @property
    def note(self) -> str:
        """The trial's line in the report's last column."""
        if self.problem is not None:
            return "FAIL (see below)"
        if not self.killed:
            return "point not reached"
        if self.starts >= 2 and self.call.replay == "idempotent":
            return "ok (same idempotency key)"
        if self.starts >= 2:
            return "ok (re-run allowed)"
        return "ok"

    def to_json(self) -> dict[str, Any]:
        """The trial as plain JSON."""
        data = dataclasses.asdict(self)
        data["call"] = dataclasses.asdict(self.call)
        data["keys"] = list(self.keys)
        data["problem"] = self.problem
        return data


@dataclass(frozen=True)
class CrashReport:
    """Every trial of a crash test; `ok` when no call's body started twice unsafely."""

    calls: tuple[CallSeen, ...]
    trials: tuple[Trial, ...]

    @property
    def problems(self) -> list[Trial]:
        """The failing trials."""
        return [t for t in self.trials if t.problem is not None]

    @property
    def ok(self) -> bool:
        """Whether no trial failed."""
        return not self.problems

    @property
    def exit_status(self) -> int:
        """0 when `ok`, else 1."""
        return 0 if self.ok else 1

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON."""
        return {
            "ok": self.ok,
            "calls": [dataclasses.asdict(c) for c in self.calls],
            "trials": [t.to_json() for t in self.trials],
        }

    def render(self) -> str:
        """The report as a text table, one row per trial, and a verdict."""
        rows = [("call", "class", "killed", "body starts", "resume", "verdict")]
        for trial in self.trials:
            killed = POINTS.get(trial.point, trial.point)
            rows.append(
                (
                    trial.call.label,
                    trial.call.replay or "-",
                    killed,
                    str(trial.starts),
                    trial.resume,
                    trial.note,
                )
            )
        lines = _table(rows)
        if self.ok:
            lines.append(f"\nok: {len(self.trials)} crashes, no tool call ran twice unsafely")
        else:
            lines.append(f"\n{len(self.problems)} of {len(self.trials)} crashes failed:")
            lines.extend(
                f"- {t.call.label}, killed {POINTS[t.point]}: {t.problem}" for t in self.problems
            )
        return "\n".join(lines)


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out
