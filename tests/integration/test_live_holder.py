"""A live worker on this machine is never declared dead by the lease (issue 27, item 3).

Real processes against a SQLite store file and a PostgreSQL server: a worker holds the claim
of an unsafe call inside a slow tool, with a lease far shorter than the tool. A second worker
must wait for it (and replay its outcome), never get "outcome unknown"; `guard.resolve` must
refuse while it runs, naming its host and pid; and `resolve` writes with compare-and-set, so
a change another process makes between its read and its write is never written over.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from langgraph_replay_guard import ReplayConflictError, ReplayGuard, ReplayInFlightError
from langgraph_replay_guard.storage import store_cas
from langgraph_replay_guard.storage.ledger_io import ReplayLedger
from tests import warm_children

from .claim_graphs import POLICY, claim_graph, effect_tools, sends
from .proc_claim import open_backend
from .test_concurrent_claims import _setup_thread

pytestmark = pytest.mark.filterwarnings(
    "ignore:langgraph-replay-guard.*durable checkpointer:langgraph_replay_guard.ReplayGuardWarning"
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(Path(__file__).with_name("proc_lease.py"))
KINDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
LEASE = 0.5
"""Far shorter than the tool: the old code declared the holder dead after it."""
TOOL_SECONDS = 5.0


class _Thread:
    """A thread stopped before its tools node, on a real store, and the processes around it."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        if kind == "postgres":
            self.target = self.store_target = request.getfixturevalue("pg_uri")
        else:
            self.target, self.store_target = str(tmp_path / "cp.db"), str(tmp_path / "store.db")
        self.effects = tmp_path / "effects.txt"
        self.id = _setup_thread("wrap", kind, self.target, self.store_target, self.effects)
        self.config = {"configurable": {"thread_id": self.id}}

    def spawn(self, action: str, *options: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "LANGSMITH_TRACING": "false", "PYTHONPATH": str(ROOT)}
        args = [action, self.kind, self.target, self.store_target, self.id, str(self.effects)]
        return warm_children.popen(
            [sys.executable, SCRIPT, *args, *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )

    def worker(
        self, *, seconds: float, go: Path | None = None, release: Path | None = None
    ) -> subprocess.Popen[bytes]:
        options = ["--seconds", str(seconds), "--lease", str(LEASE), "--wait", "60"]
        options += ["--go", str(go)] if go else []
        return self.spawn("resume", *options, *(["--release", str(release)] if release else []))

    @contextmanager
    def store(self) -> Iterator[Any]:
        with open_backend(self.kind, self.target, self.store_target) as (_, store):
            yield store

    def row(self, store: Any) -> Any:
        rows = ReplayLedger(store).rows(self.id)
        assert len(rows) <= 1, rows
        return rows[0] if rows else None

    def wait_for_claim(self, store: Any, holder: subprocess.Popen[bytes]) -> Any:
        """The `started` row once the holder claimed the call (it is then inside the tool)."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            row = self.row(store)
            if row is not None and row.status == "started" and row.owner is not None:
                return row
            assert holder.poll() is None, _output(holder)
            time.sleep(0.05)
        pytest.fail("the holder never claimed the call")


def _output(proc: subprocess.Popen[bytes], timeout: float = 120) -> dict[str, Any]:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err.decode()[-2000:]
    result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return result


def _guard(store: Any) -> ReplayGuard:
    return ReplayGuard(POLICY.model_copy(update={"in_flight_lease": LEASE}), store=store)


@pytest.mark.parametrize("kind", KINDS)
def test_a_second_worker_waits_for_a_live_holder_past_its_lease(kind, tmp_path, request):
    thread = _Thread(kind, tmp_path, request)
    go = tmp_path / "go"
    holder = thread.worker(seconds=TOOL_SECONDS)
    second = thread.worker(seconds=TOOL_SECONDS, go=go)  # imports while the holder claims
    with thread.store() as store:
        thread.wait_for_claim(store, holder)
    time.sleep(LEASE * 2)  # the holder's lease ran out; its process is inside the tool
    assert holder.poll() is None, "the holder must still be inside the tool"
    go.touch()
    first, then = _output(holder), _output(second)
    assert first["outcome"] == "ran", first
    # Before the fix: ReplayUnsafeError ("its outcome is unknown") at lease expiry.
    assert then["outcome"] == "replayed", then
    assert sends(thread.effects) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_resolve_refuses_while_the_holder_is_alive(kind, tmp_path, request):
    thread = _Thread(kind, tmp_path, request)
    release = tmp_path / "release"
    holder = thread.worker(seconds=TOOL_SECONDS, release=release)
    with thread.store() as store:
        claimed = thread.wait_for_claim(store, holder)
        time.sleep(LEASE * 2)
        assert holder.poll() is None, "the holder must still be inside the tool"
        guard = _guard(store)
        graph = claim_graph("wrap", guard, effect_tools(thread.effects), None, store)
        with pytest.raises(ReplayInFlightError) as refused:
            guard.resolve(graph, thread.config, claimed.tool_call_id, "retry", resume=False)
        message = str(refused.value)
        assert f"host {socket.gethostname()!r}, pid {holder.pid}" in message, message
        assert "Wait for that worker" in message, message
        assert "stop that process" in message, message
        assert refused.value.facts["owner"]["pid"] == holder.pid
        assert thread.row(store).rev == claimed.rev, "nothing was written"
        assert holder.poll() is None, "the holder was still alive when resolve refused"
        release.touch()  # checked while it was inside the tool: let the tool end now
        assert _output(holder)["outcome"] == "ran"
        assert thread.row(store).status == "completed"
    assert sends(thread.effects) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_resolve_loses_its_compare_and_set_to_a_concurrent_change(
    kind, tmp_path, request, monkeypatch
):
    thread = _Thread(kind, tmp_path, request)
    holder = thread.worker(seconds=120)
    with thread.store() as store:
        claimed = thread.wait_for_claim(store, holder)
        holder.send_signal(signal.SIGKILL)  # dies inside the tool: the outcome is unknown
        holder.wait(timeout=30)
        calls: list[str] = []
        real: Callable[..., Any] = store_cas.compare_and_set

        def racing(target: Any, op: Any) -> Any:
            if not calls:  # between resolve's read and its write, another operator resolves
                other = thread.spawn(
                    "resolve",
                    "--tool-call-id",
                    claimed.tool_call_id,
                    "--outcome",
                    "succeeded",
                    "--result",
                    "sent",
                )
                calls.append(_output(other)["outcome"])
            return real(target, op)

        monkeypatch.setattr(store_cas, "compare_and_set", racing)
        guard = _guard(store)
        graph = claim_graph("wrap", guard, effect_tools(thread.effects), None, store)
        with pytest.raises(ReplayConflictError, match="changed while it was being resolved"):
            guard.resolve(graph, thread.config, claimed.tool_call_id, "retry", resume=False)
        assert calls == ["resolved"]
        row = thread.row(store)
        # The other operator's resolution stands; the `retry` was not written over it.
        assert (row.status, row.resolved_by) == ("completed", "human")
        assert row.result["content"] == "sent"
    assert sends(thread.effects) == 0
