"""Who holds a claim and whether it is alive: a local holder by its process, others by lease."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Iterator

import pytest

from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.owners import OwnerRegistry, describe, machine_id

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

NOW = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
EXPIRED = (NOW - dt.timedelta(seconds=5)).isoformat(timespec="milliseconds")
LIVE = (NOW + dt.timedelta(seconds=5)).isoformat(timespec="milliseconds")


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _holder(pid: int, until: str, **changes: object) -> dict[str, object]:
    owner: dict[str, object] = {
        "id": "x",
        "machine": machine_id(),
        "pid": pid,
        "pst": owners._start_ticks(pid),
        "until": until,
    }
    owner.update(changes)
    return owner


def test_a_live_local_process_is_alive_after_its_lease(other_process):
    registry = OwnerRegistry()
    assert registry.is_alive(_holder(other_process.pid, EXPIRED), NOW)


def test_a_dead_local_process_is_dead_within_its_lease(other_process):
    owner = _holder(other_process.pid, LIVE)
    other_process.kill()
    other_process.wait()
    assert not OwnerRegistry().is_alive(owner, NOW)


def test_a_reused_pid_is_not_the_holder(other_process):
    owner = _holder(other_process.pid, LIVE, pst="1")
    assert not OwnerRegistry().is_alive(owner, NOW)


def test_a_holder_elsewhere_or_without_start_time_trusts_the_lease(other_process):
    registry = OwnerRegistry()
    for changes in ({"machine": "elsewhere|boot|ns"}, {"pst": None}):
        assert registry.is_alive(_holder(other_process.pid, LIVE, **changes), NOW)
        assert not registry.is_alive(_holder(other_process.pid, EXPIRED, **changes), NOW)


def test_a_claim_of_this_process_is_alive_while_its_attempt_runs():
    registry = OwnerRegistry()
    owner = registry.new_owner(0.001, NOW - dt.timedelta(seconds=5))
    assert registry.is_alive(owner, NOW)
    registry.release(owner)
    assert not registry.is_alive(owner, NOW)


def test_describe_names_host_and_pid():
    assert describe({"machine": "web-1|boot|ns", "pid": 42}) == "host 'web-1', pid 42"
    assert describe({}) == "host 'unknown', pid None"


def test_a_failed_read_of_the_host_facts_is_not_kept_half_known(monkeypatch):
    # Under a blocking-call detector the first read raised after the pid was kept; every
    # later claim of the process named no machine and no start time (issue 32, seam 11).
    registry = OwnerRegistry()
    real = owners.machine_id
    calls = []

    def refused() -> str:
        calls.append(1)
        if len(calls) == 1:
            msg = "Blocking call to os.readlink"
            raise RuntimeError(msg)
        return real()

    monkeypatch.setattr(owners, "machine_id", refused)
    with pytest.raises(RuntimeError, match="readlink"):
        registry.new_owner(60, NOW)
    owner = registry.new_owner(60, NOW)
    assert owner["machine"] == real()
    assert owner["pst"] == owners._start_ticks(owner["pid"])
    assert owner["pst"] is not None


def test_the_async_read_of_the_host_facts_runs_off_the_event_loop():
    import asyncio
    import threading

    registry = OwnerRegistry()
    loop_thread = threading.get_ident()
    where = []
    real = owners._host_facts

    def facts() -> object:
        where.append(threading.get_ident())
        return real()

    async def run() -> None:
        await registry.aready()
        await registry.aready()  # read once

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(owners, "_host_facts", facts)
        asyncio.run(run())
    assert len(where) == 1
    assert where[0] != loop_thread
    assert registry.new_owner(60, NOW)["machine"] == machine_id()
