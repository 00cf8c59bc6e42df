"""Crash trials: SIGKILL a real process at each tool boundary, resume in a fresh one, count effects.

Run `python -m tests.integration.crash_matrix [--postgres URI]` for the table in
docs/replay-safety.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import warm_children

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ("batch", "retry", "interrupt")
BOUNDARIES = ("before_effect", "after_effect", "after_outcome", "after_checkpoint")
DURABILITIES = ("sync", "async")
UNSAFE_TOOL = {"batch": "send_email", "retry": "send_email", "interrupt": "approve_and_send"}


@dataclass
class Trial:
    backend: str
    db: str
    scenario: str
    durability: str
    boundary: str
    effects: str
    killed: bool = False
    resumes: list[str] = field(default_factory=list)
    final: dict[str, Any] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    charge_keys: set[str] = field(default_factory=set)
    error: str | None = None

    @property
    def unsafe_runs(self) -> int:
        return self.counts[UNSAFE_TOOL[self.scenario]]

    def problems(self) -> list[str]:
        """What broke the promises (empty when the trial is fine)."""
        found = []
        if self.error:
            found.append(self.error)
        if self.unsafe_runs != 1:
            found.append(f"unsafe side effect ran {self.unsafe_runs} times")
        if len(self.charge_keys) > 1:
            found.append(f"idempotent call used {len(self.charge_keys)} different keys")
        if self.final.get("status") != "done" or self.final.get("final") != "All done.":
            found.append(f"run did not finish: {self.final}")
        elif not self.final.get("all_answered"):
            found.append("a tool call was left without an answer")
        return found


def _child(trial: Trial, thread: str, **extra: Any) -> subprocess.CompletedProcess[str]:
    opts = {
        "backend": trial.backend,
        "db": trial.db,
        "thread": thread,
        "durability": trial.durability,
        "scenario": trial.scenario,
        "effects": trial.effects,
        "kill_at": None,
        "phase": "run",
        **extra,
    }
    env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONWARNINGS": "ignore"}
    # A real process (its own pid, killed by its own SIGKILL), forked from a warm zygote so
    # each of a trial's two or three processes skips LangGraph's imports (tests/warm_children.py).
    return warm_children.run(
        [sys.executable, "-m", "tests.integration.crash_child", json.dumps(opts)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _report(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"status": f"exit {proc.returncode}", "stderr": proc.stderr[-2000:]}
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def _count(trial: Trial) -> None:
    trial.counts.clear()
    trial.charge_keys.clear()
    if not os.path.exists(trial.effects):
        return
    with open(trial.effects, encoding="utf-8") as handle:
        for line in handle:
            name, detail = line.rstrip("\n").split("\t", 1)
            trial.counts[name] += 1
            if name == "charge_card":
                trial.charge_keys.add(detail)


def _why(reason: str) -> str:
    if "lost" in reason:
        return "ReplayUnsafeError (earlier call never answered)"
    if "identical" in reason:
        return "ReplayUnsafeError (identical call unknown)"
    return "ReplayUnsafeError (outcome unknown)"


def run_trial(trial: Trial) -> Trial:
    """Kill, resume, let an operator resolve what is unknown, and count the side effects."""
    thread = f"crash-{uuid.uuid4().hex[:10]}"
    first = _child(trial, thread, kill_at=trial.boundary)
    trial.killed = first.returncode == -9
    if not trial.killed:
        trial.resumes.append(f"not killed ({_report(first).get('status')})")
    report = _report(_child(trial, thread))
    for _ in range(3):
        if report.get("resubmitted"):
            trial.resumes.append("checkpoint lost the answers: request sent again")
        if report.get("status") != "unknown":
            break
        _count(trial)
        facts = report["facts"]
        # The operator checks upstream: did the email go out? Then it succeeded; else retry.
        sent = trial.counts[facts["tool"]] >= 1
        outcome = "succeeded" if sent else "retry"
        trial.resumes.append(f"{_why(facts['reason'])}: operator says {outcome}")
        report = _report(
            _child(
                trial,
                thread,
                phase="resolve",
                tool_call_id=facts["tool_call_id"],
                outcome=outcome,
                result="confirmed upstream: sent" if sent else None,
            )
        )
    if report.get("status") == "done":
        replayed = ", ".join(report["replayed"])
        trial.resumes.append(f"answered from the ledger: {replayed}" if replayed else "went on")
    trial.final = report
    _count(trial)
    return trial


def trials(backend: str, db_for: Any, workdir: str) -> list[Trial]:
    """Every combination of scenario, durability and boundary for one backend."""
    made = []
    for scenario, durability, boundary in itertools.product(SCENARIOS, DURABILITIES, BOUNDARIES):
        name = f"{backend}-{scenario}-{durability}-{boundary}"
        made.append(
            Trial(
                backend=backend,
                db=db_for(name),
                scenario=scenario,
                durability=durability,
                boundary=boundary,
                effects=os.path.join(workdir, f"{name}.effects"),
            )
        )
    return made


def run_all(made: list[Trial], workers: int = 2) -> list[Trial]:
    """Run trials in parallel (each is its own processes, thread and effects file)."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(run_trial, made))


def table(done: list[Trial]) -> str:
    """A Markdown table of trials and outcomes."""
    rows = [
        "| backend | scenario | durability | killed at | unsafe runs | idempotent keys | "
        "pure runs | what the fresh process saw |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t in done:
        rows.append(
            f"| {t.backend} | {t.scenario} | {t.durability} | {t.boundary}"
            f"{'' if t.killed else ' (not reached)'} | {t.unsafe_runs} | "
            f"{len(t.charge_keys) if t.scenario != 'interrupt' else '-'} | "
            f"{t.counts['lookup'] if t.scenario != 'interrupt' else '-'} | "
            f"{'; '.join(t.resumes)} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--postgres", help="PostgreSQL URI (also run the Postgres trials)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        made = trials("sqlite", lambda name: os.path.join(workdir, f"{name}.db"), workdir)
        if args.postgres:
            _setup_postgres(args.postgres)
            made += trials("postgres", lambda name: args.postgres, workdir)
        done = run_all(made)
    print(table(done))
    bad = [(t, t.problems()) for t in done if t.problems()]
    print(f"\n{len(done)} trials, {len(bad)} with problems")
    for t, problems in bad:
        print(f"- {t.backend}/{t.scenario}/{t.durability}/{t.boundary}: {problems}")


def _setup_postgres(uri: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.store.postgres import PostgresStore

    with PostgresSaver.from_conn_string(uri) as saver, PostgresStore.from_conn_string(uri) as store:
        saver.setup()
        store.setup()


if __name__ == "__main__":
    main()
