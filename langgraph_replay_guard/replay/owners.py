"""Who holds a ledger claim, and whether that worker is still alive."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any, NamedTuple

__all__ = ["Owner", "OwnerRegistry", "aready", "describe", "is_alive", "machine_id", "ready"]

Owner = dict[str, Any]
"""A claim holder as stored in a ledger row: `id`, `machine`, `pid`, `pst`, `until`."""


def _read(path: str) -> str:
    """A small procfs file's text, or "" when it cannot be read.

    Read with `O_NONBLOCK` and `os.read`: procfs answers from kernel memory, never from a
    disk, and saying so lets blocking-call detectors (LangGraph's server runs `blockbuster`)
    tell this read, which `is_alive` may do on an event loop, from file I/O that blocks.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return ""
    try:
        chunks = []
        while chunk := os.read(fd, 4096):
            chunks.append(chunk)
        return b"".join(chunks).decode("ascii", errors="replace").strip()
    except OSError:
        return ""
    finally:
        os.close(fd)


def _ns_inode(kind: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{kind}")
    except OSError:
        return ""


def machine_id() -> str:
    """An id shared by the processes that can see each other's pids.

    Host name, kernel boot id and pid namespace: two containers with one host name but their
    own pid namespaces get different ids, so a pid is only ever checked where it means
    something.
    """
    boot = _read("/proc/sys/kernel/random/boot_id")
    return f"{socket.gethostname()}|{boot}|{_ns_inode('pid')}"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):  # a zombie or dead process is not running
        return None
    return fields[19]


class _Host(NamedTuple):
    """This process's facts for its claims, read together (never half of them)."""

    pid: int
    machine: str
    pst: str | None


def _host_facts() -> _Host:
    """Read this process's facts (blocking reads: call it off the event loop)."""
    pid = os.getpid()
    return _Host(pid, machine_id(), _start_ticks(pid))


class OwnerRegistry:
    """The claims this process holds right now.

    A claim names its owner's machine, pid and process start time, and carries a lease
    (`until`). Another process on the same machine checks the pid and start time: the
    holder is alive exactly while that process runs, however old its lease (the lease never
    declares a live local process dead). A process elsewhere, or a holder whose start time
    is unknown, trusts the lease. A claim of this very process is alive while its attempt
    runs.
    """

    def __init__(self) -> None:
        """Create the registry (one per process, see `REGISTRY`)."""
        self._lock = threading.Lock()
        self._active: set[str] = set()
        self._host: _Host | None = None

    def _current(self) -> _Host | None:
        """This process's facts if they were read in this process (not a forked parent's)."""
        host = self._host
        return host if host is not None and host.pid == os.getpid() else None

    def ready(self) -> _Host:
        """Read this process's facts once (per process: a forked child reads its own).

        They are read before anything is stored, so a read that fails (a blocking-call
        detector's error on an event loop) leaves nothing half-known behind: the next call
        reads again, rather than writing claims with no machine and no start time.
        """
        host = self._current()
        if host is not None:
            return host
        read = _host_facts()
        with self._lock:
            host = self._current()
            if host is None:
                self._host = host = read
                self._active = set()  # a forked child holds none of its parent's claims
            return host

    async def aready(self) -> None:
        """`ready` off the event loop (the async integrations call it before a claim)."""
        if self._current() is None:
            await asyncio.to_thread(self.ready)

    def new_owner(self, lease_seconds: float, now: dt.datetime) -> Owner:
        """A fresh claim holder for one attempt; it counts as alive until `release`."""
        host = self.ready()
        owner_id = os.urandom(16).hex()  # as `uuid4().hex`, without building a `UUID` (3 us)
        with self._lock:
            self._active.add(owner_id)
        until = now + dt.timedelta(seconds=lease_seconds)
        return {
            "id": owner_id,
            "machine": host.machine,
            "pid": host.pid,
            "pst": host.pst,
            "until": until.isoformat(timespec="milliseconds"),
        }

    def release(self, owner: Mapping[str, Any] | None) -> None:
        """The attempt ended (any way): its claim no longer counts as alive here."""
        if owner is not None:
            with self._lock:
                self._active.discard(str(owner.get("id")))

    def is_alive(self, owner: Mapping[str, Any], now: dt.datetime) -> bool:
        """Whether the worker holding a claim may still be running the tool."""
        host = self.ready()
        machine, pid = host.machine, host.pid
        with self._lock:
            active = owner.get("id") in self._active
        if owner.get("machine") != machine or not machine:
            return _lease_live(owner, now)
        if owner.get("pid") == pid:
            return active
        other = owner.get("pid")
        if not isinstance(other, int) or other <= 0:
            return _lease_live(owner, now)
        started = owner.get("pst")
        if started is None:  # the holder could not read its own start time: no process check
            return _lease_live(owner, now)
        # A local holder is checked by its process, never by the lease: a worker inside a
        # slow tool is alive however long it takes (issue 27), and a dead one is seen at once.
        return bool(_start_ticks(other) == started)


def _lease_live(owner: Mapping[str, Any], now: dt.datetime) -> bool:
    until = owner.get("until")
    if not isinstance(until, str):
        return False
    try:
        expires = dt.datetime.fromisoformat(until)
    except ValueError:
        return False
    if expires.tzinfo is None:
        expires = expires.replace(tzinfo=dt.UTC)
    return now < expires


REGISTRY = OwnerRegistry()
"""This process's claims."""


def ready() -> None:
    """Read this process's facts now (blocking: not on an event loop; see `aready`)."""
    REGISTRY.ready()


async def aready() -> None:
    """Read this process's facts off the event loop, once per process."""
    await REGISTRY.aready()


def is_alive(owner: Mapping[str, Any] | None, now: dt.datetime) -> bool:
    """Whether a claim's holder may still be running (False for no holder)."""
    return owner is not None and REGISTRY.is_alive(owner, now)


def describe(owner: Mapping[str, Any]) -> str:
    """A claim holder for people: `host 'web-1', pid 4242`."""
    machine = owner.get("machine")
    host = machine.split("|", 1)[0] if isinstance(machine, str) and machine else "unknown"
    return f"host {host!r}, pid {owner.get('pid')}"
