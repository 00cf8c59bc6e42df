"""Stand in for `python script ...`, run as a child of a warm zygote (warm_children.stdio_command).

`python tests/warm_launch.py script args...` with `REPLAY_GUARD_TEST_ZYGOTE` naming a zygote's
socket: the zygote forks a child running `script` on this process's stdin, stdout and stderr
(a real process, with this one's environment and working directory), and this one exits
with the child's status. It imports nothing heavy (the point: the zygote imported it all).
A SIGTERM or SIGINT sent here is passed on to the child.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # import `tests` from the checkout

from tests import warm_children  # noqa: E402  (after the path is set)


def main(argv: list[str]) -> int:
    """Run `argv` (a script and its arguments) in a zygote's child; return its exit status."""
    if not os.environ.get(warm_children.ZYGOTE_ENV):
        os.execv(sys.executable, [sys.executable, *argv])  # no zygote: start it cold
    child = warm_children.WarmProcess([sys.executable, *argv], stdin=0, stdout=1, stderr=2)
    # Only the child holds the pipes now: the caller sees the server's stdout end when the
    # server's does. (stderr is kept for this process's own errors.)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, _frame: child.send_signal(number))
    code = child.wait()
    return 128 - code if code < 0 else code  # killed by a signal: as a shell reports it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
