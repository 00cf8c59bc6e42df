"""The run's temporary files on tmpfs (/dev/shm) when the machine has room, removed after a pass.

The suite creates tens of thousands of files: every `tmp_path`, each PostgreSQL server's
cluster (a copy of the run's template) and each `CREATE DATABASE` copy of its files, each
crash-test phase's SQLite pair, log and result. On a disk file system each creation pays the
file system's allocator (on ext4 about a tenth of the whole run's CPU, most of it in the
PostgreSQL servers' database copies); on tmpfs it is a page of memory. Measured back to back
on a 2-core machine, `make test`: 232 s against 197 s wall, 420 s against 348 s of the
machine's CPU (docs/benchmarks.md).

The first pytest process of a run (the xdist controller, or the only one) makes one directory
under /dev/shm and points `TMPDIR` at it, so its workers, their servers, their children and
nested pytest runs all write there (`tempfile` and pytest's `tmp_path` follow `TMPDIR`). It
removes the directory at the end when every test passed, and keeps it (saying where) when one
failed, so the failed test's files stay readable. Nothing changes when `TMPDIR` is set
already, or /dev/shm is not a writable tmpfs with room for a run (`_ROOM`) in free memory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

_SHM = Path("/dev/shm")
_PREFIX = "replay-guard-tests-"
OWNER = ".owner"
"""The file in a run's directory naming the pid of the process that made it."""
_ROOM = 3 << 30
"""Free bytes /dev/shm and memory must both have: a run keeps up to about 1 GB at once."""
KEEP = 2
"""Directories of earlier runs kept (failed, or killed before their end): the newest two."""


def _room(path: Path) -> bool:
    """Whether `path` is a writable tmpfs with `_ROOM` free, and memory has `_ROOM` available."""
    try:
        mounts = Path("/proc/mounts").read_text()
        available = next(
            int(line.split()[1]) * 1024
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemAvailable:")
        )
        usage = shutil.disk_usage(path)
    except (OSError, StopIteration, ValueError, IndexError):
        return False
    tmpfs = any(
        fields[1] == str(path) and fields[2] == "tmpfs"
        for fields in (line.split() for line in mounts.splitlines())
        if len(fields) > 2
    )
    return tmpfs and os.access(path, os.W_OK) and usage.free >= _ROOM and available >= _ROOM


def use() -> Path | None:
    """Point this process's `TMPDIR` at a new directory on /dev/shm, if it should.

    Returns:
        The directory this process made (it removes it in `finish`), or None: `TMPDIR` was
        set (by the user, or by the outer run of a nested one), or /dev/shm cannot take it.
    """
    if os.environ.get("TMPDIR") or not _room(_SHM):
        return None
    _sweep(_SHM)
    directory = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=_SHM))
    # /tmp's own mode, not mkdtemp's 0o700: when the suite runs as root its PostgreSQL servers
    # run as the `postgres` user, under this directory.
    directory.chmod(0o1777)
    (directory / OWNER).write_text(str(os.getpid()))
    os.environ["TMPDIR"] = str(directory)
    tempfile.tempdir = None  # `gettempdir()` caches its first answer: read TMPDIR again
    return directory


def finish(directory: Path | None, *, passed: bool) -> None:
    """Remove the run's directory after a passing run; keep it after a failing one.

    Args:
        directory: What `use` returned in this process (None: nothing to do).
        passed: Whether every test passed.
    """
    if directory is not None and passed and _owner(directory) == os.getpid():
        shutil.rmtree(directory, ignore_errors=True)


def _owner(directory: Path) -> int | None:
    """The pid of the process that made a run's directory (None: not written, or unreadable)."""
    try:
        return int((directory / OWNER).read_text())
    except (OSError, ValueError):
        return None


def _running(directory: Path) -> bool:
    """Whether the process that made a run's directory is alive (another user's counts)."""
    owner = _owner(directory)
    if owner is None:
        return False
    try:
        os.kill(owner, 0)
    except PermissionError:
        return True  # alive, and another user's
    except OSError:
        return False
    return True


def _sweep(root: Path) -> None:
    """Remove earlier runs' directories but the newest `KEEP` (memory is not a disk).

    A failed run keeps its directory for reading, and a run killed before its end leaves its
    own: as pytest keeps its last three base directories, only the newest ones stay. A
    directory whose run is still going (its `.owner` names a live process) is never touched.
    """
    ended: list[tuple[float, Path]] = []
    for found in root.glob(f"{_PREFIX}*"):
        if not _running(found):
            with contextlib.suppress(OSError):  # removed meanwhile
                ended.append((found.stat().st_mtime, found))
    for _, old in sorted(ended, reverse=True)[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
