"""What a crash test found: one trial per tool call and crash point, and its verdict."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["POINTS", "PURE_HINT", "CallSeen", "CrashReport", "Trial"]

POINTS: dict[str, str] = {
    "before_claim": "before the claim",
    "after_claim": "after the claim, before the tool",
    "after_tool": "after the tool, before its outcome is recorded",
    "after_outcome": "after the outcome, before the checkpoint",
}
"""The crash points, in the order a call passes them, with how the report names them."""

UNKNOWN_POINTS = ("after_claim", "after_tool")
"""The points where a crash leaves an unsafe call's outcome unknown: claimed, not finished."""

DIVERGED_HINT = (
    "A trial is not verified when the crashed or the resumed run went another way than the "
    "learning run: the graph must decide from its state alone (a scripted model whose steps "
    "read the messages, as examples/crashtest_agent.py does, not one that restarts its script "
    "in a new process)."
)

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
    diverged: str | None = None
    """How the crashed or the resumed run left the learning run's path (a call the learning run
    never made, other arguments, another order), or None. Such a trial is not verified: its
    counts say nothing about the calls the learning run knows."""
    reruns: tuple[str, ...] = ()
    """Bodies other than this call's that started more often than the learning run started
    them: counted per call and per tool and arguments, so a rerun under a new id is seen."""
    surfaced: bool | None = None
    """Whether the resume raised or stopped at an interrupt (None: no resume ran)."""

    @property
    def verified(self) -> bool:
        """Whether the trial ran as planned and stayed on the learning run's path."""
        return self.error is None and self.diverged is None

    @property
    def problem(self) -> str | None:
        """Why the trial fails or is not verified, or None."""
        if self.error is not None:
            return f"not verified: {self.error}"
        if self.diverged is not None:
            # What it ran is still reported: an unsafe body run twice is a fact whatever path
            # the run took.
            return "; ".join([f"not verified: {self.diverged}", *self.reruns])
        own = self._own_problem()
        if own is not None:
            return own
        if self.reruns:
            return "; ".join(self.reruns)
        if (
            self.call.replay == "unsafe"
            and self.killed
            and self.point in UNKNOWN_POINTS
            and self.surfaced is False
        ):
            return (
                f"unsafe, its outcome was unknown after the crash but the resume went on "
                f"({self.resume}) instead of raising or stopping at an interrupt"
            )
        return None

    def _own_problem(self) -> str | None:
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
        if not self.verified:
            return "NOT VERIFIED (see below)"
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
        data["reruns"] = list(self.reruns)
        data["problem"] = self.problem
        data["verified"] = self.verified
        return data


@dataclass(frozen=True)
class CrashReport:
    """Every trial of a crash test; `ok` when every trial was verified and none failed."""

    calls: tuple[CallSeen, ...]
    trials: tuple[Trial, ...]
    unguarded: str | None = None
    """How the same graph without the guard behaved otherwise (its tool calls or its final
    answer in a clean run), or None: the same, or not compared."""
    learning: tuple[str, ...] = ()
    """Unsafe or idempotent bodies that ran twice for one call in the learning run itself
    (no crash needed: a middleware inside the guard ran the body again)."""
    unclassified: tuple[str, ...] = ()
    """Tools of the learning run that nothing classified: they ran as `default_policy`
    (`pure`), so a side effect among them is rerun after a crash. Listed, not a failure:
    the trials judge the classes as declared."""

    @property
    def problems(self) -> list[Trial]:
        """The failing trials and the ones that could not be verified."""
        return [t for t in self.trials if t.problem is not None]

    @property
    def unverified(self) -> list[Trial]:
        """The trials that could not be verified (an error, a run off the learning run's path)."""
        return [t for t in self.trials if not t.verified]

    @property
    def ok(self) -> bool:
        """Whether every trial was verified, none failed, and the unguarded run agreed."""
        return not self.problems and self.unguarded is None and not self.learning

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
            "unverified": len(self.unverified),
            "unguarded": self.unguarded,
            "learning": list(self.learning),
            "unclassified": list(self.unclassified),
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
        if self.unclassified:
            names = ", ".join(self.unclassified)
            lines.append(
                f"\nunclassified tools (no tools entry, toolkit or MCP annotations; they ran as "
                f"default_policy): {names}. A side effect among them is rerun after a crash: "
                "give each its class in GuardConfig(tools={...})."
            )
        if self.ok:
            lines.append(f"\nok: {len(self.trials)} crashes, no tool call ran twice unsafely")
            return "\n".join(lines)
        # Never "ok" over a trial it could not check: a resumed run that went another way
        # than the learning run proves nothing about the calls the learning run made.
        unverified = len(self.unverified)
        failed = len(self.problems) - unverified
        lines.append(
            f"\n{failed} of {len(self.trials)} crashes failed, {unverified} could not be verified:"
        )
        lines.extend(
            f"- {t.call.label}, killed {POINTS.get(t.point, t.point)}: {t.problem}"
            for t in self.problems
        )
        if self.unguarded is not None:
            lines.append(f"- without the guard: {self.unguarded}")
        lines.extend(f"- in the learning run: {problem}" for problem in self.learning)
        if any(t.diverged for t in self.trials):
            lines.append(DIVERGED_HINT)
        return "\n".join(lines)


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out
