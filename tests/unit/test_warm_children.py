"""Issue 34, item 14: children forked from the warm zygote are real, separate processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import warm_children

REPORT = """
import json, os, sys, threading
print(json.dumps({
    "pid": os.getpid(),
    "ppid": os.getppid(),
    "cwd": os.getcwd(),
    "argv": sys.argv[1:],
    "marker": os.environ.get("WARM_MARKER"),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "threads": threading.active_count(),
    "hash": hash("same text"),
    "flags": sys.flags.hash_randomization,
}))
"""


def _report(tmp_path: Path, *args: str) -> dict[str, object]:
    done = warm_children.run(
        [sys.executable, "-c", REPORT, *args],
        cwd=tmp_path,
        env={**os.environ, "WARM_MARKER": "here"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stderr == ""
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_a_warm_child_is_its_own_process_with_the_cwd_env_and_argv_asked(tmp_path: Path) -> None:
    first, second = _report(tmp_path, "a", "b"), _report(tmp_path)
    assert first["pid"] != os.getpid()
    assert first["pid"] != second["pid"]
    assert first["cwd"] == str(tmp_path)
    assert first["argv"] == ["a", "b"]
    assert first["marker"] == "here"
    # Nothing the zygote opened (its socket, its pipes, a database) or started (a thread)
    # reaches the child: three standard streams (and the fd listing them), one thread.
    assert len(first["fds"]) <= 4, first["fds"]  # type: ignore[arg-type]
    assert first["threads"] == 1


def test_consecutive_children_do_not_share_a_hash_seed(tmp_path: Path) -> None:
    # A killed run and its resume are consecutive children: as two cold processes, they
    # must not agree on hash() by accident (a bug keyed on hash() would pass otherwise).
    first, second, third = (_report(tmp_path) for _ in range(3))
    assert first["flags"] == 1
    assert first["hash"] != second["hash"]
    assert second["hash"] != third["hash"]


def test_sigkill_ends_a_warm_child_as_it_ends_a_cold_one(tmp_path: Path) -> None:
    itself = warm_children.run(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
        capture_output=True,
        timeout=120,
    )
    assert itself.returncode == -signal.SIGKILL
    cold = subprocess.run(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert cold.returncode == itself.returncode
    child = warm_children.popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(300)"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    assert child.poll() is None
    os.kill(child.pid, signal.SIGKILL)  # the test's own kill, by pid
    assert child.wait(timeout=30) == -signal.SIGKILL


def test_exit_codes_tracebacks_and_stdin_read_as_from_a_cold_child(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\ndata = sys.stdin.read()\nprint(data.upper())\nsys.exit(len(data))\n",
        encoding="utf-8",
    )
    done = warm_children.run(
        [sys.executable, str(script)], input="abc", capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout) == (3, "ABC\n")
    failed = warm_children.run(
        [sys.executable, "-c", "raise ValueError('boom')"], capture_output=True, text=True
    )
    assert failed.returncode == 1
    assert "Traceback" in failed.stderr
    assert "ValueError: boom" in failed.stderr
    with pytest.raises(subprocess.TimeoutExpired):
        warm_children.run([sys.executable, "-c", "import time; time.sleep(300)"], timeout=1)


def test_a_command_with_interpreter_options_starts_cold(tmp_path: Path) -> None:
    # -X options, or PYTHON* variables the zygote did not start with, take effect only at
    # start-up: such a child is a fresh interpreter (subprocess.Popen), not a fork.
    flagged = warm_children.popen(
        [sys.executable, "-X", "dev", "-c", "import sys; print(sys.flags.dev_mode)"],
        stdout=subprocess.PIPE,
    )
    assert isinstance(flagged, subprocess.Popen)
    assert flagged.communicate(timeout=120)[0].strip() == b"True"
    optimized = warm_children.popen(
        [sys.executable, "-c", "pass"], env={**os.environ, "PYTHONOPTIMIZE": "1"}
    )
    assert isinstance(optimized, subprocess.Popen)
    assert optimized.wait(timeout=120) == 0


def test_loadgroup_keeps_a_group_on_one_worker() -> None:
    # pytest 9 reads a node id from `_id`, where pytest-xdist 3.8 does not write its `@group`
    # suffix: without tests/conftest.py writing it, `--dist loadgroup` spread every group.
    root = Path(__file__).resolve().parents[2]
    # The nested pytest's controller is forked warm, and so are its two xdist workers: execnet
    # starts each as `sys.executable -u -c ...`, the launcher of a warm child (`warm_python`).
    done = warm_children.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-n", "2"),
            *("--dist", "loadgroup", "tests/integration/test_cli_namespace.py", "-k", "parse"),
        ],
        cwd=root,
        env={**os.environ, "LANGSMITH_TRACING": "false"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        warm_python=True,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    # The test lines (xdist also names each warm worker's interpreter, as not the
    # controller's: the controller's `sys.executable` is the warm launcher).
    ran = [line for line in done.stdout.splitlines() if line.startswith("[gw") and "::" in line]
    assert len(ran) >= 4, done.stdout[-3000:]
    assert len({line.split()[0] for line in ran}) == 1, ran
    assert all("@tests/integration/test_cli_namespace.py" in line for line in ran), ran


@pytest.mark.parametrize("unbuffered", ["1", None])
def test_a_warm_childs_streams_are_buffered_as_a_cold_childs(unbuffered: str | None) -> None:
    code = (
        "import sys; print(type(sys.stdout.buffer).__name__, sys.stdout.write_through, "
        "sys.stdout.line_buffering, sys.stderr.line_buffering, sys.dont_write_bytecode)"
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANGSMITH_TRACING": "false"}
    env.update(
        {"PYTHONUNBUFFERED": unbuffered, "PYTHONDONTWRITEBYTECODE": "1"} if unbuffered else {}
    )
    kwargs = {"capture_output": True, "text": True, "timeout": 120, "env": env}
    warm = warm_children.run([sys.executable, "-c", code], **kwargs)  # type: ignore[arg-type]
    cold = subprocess.run([sys.executable, "-c", code], check=False, **kwargs)  # type: ignore[call-overload]
    assert warm.stdout == cold.stdout, (warm.stderr, cold.stderr)


def test_an_unbuffered_child_is_warm_and_unbuffered_as_a_cold_one() -> None:
    # `python -u -c ...` is how execnet starts pytest-xdist's workers (a nested `pytest -n 2`).
    code = (
        "import sys; print(type(sys.stdout.buffer).__name__, sys.stdout.write_through, "
        "sys.stdout.line_buffering, sys.stderr.line_buffering)"
    )
    argv = [sys.executable, "-u", "-c", code]
    child = warm_children.popen(argv, stdout=subprocess.PIPE)
    assert not isinstance(child, subprocess.Popen)  # forked from a zygote
    warm = child.communicate(timeout=120)[0]
    cold = subprocess.run(argv, capture_output=True, timeout=120, check=True).stdout
    assert warm == cold


def test_a_warm_python_childs_own_python_children_are_warm_too(tmp_path: Path) -> None:
    # `warm_python=True` (tests/integration/test_stack_examples.py): a program that starts
    # `sys.executable script` itself (an example's MCP servers) gets real processes forked from
    # the zygote, with their own pid, streams, environment and exit status, instead of cold
    # interpreters importing LangGraph again. Without it, the same program starts them cold.
    script = tmp_path / "child.py"
    script.write_text(
        "import os, sys\n"
        "print(os.environ['WARM_MARKER'], 'langgraph.graph' in sys.modules, os.getpid())\n"
        "sys.exit(int(sys.argv[1]))\n",
        encoding="utf-8",
    )
    program = (
        "import os, subprocess, sys\n"
        "done = subprocess.run([sys.executable, sys.argv[1], '7'], capture_output=True,\n"
        "    text=True, env={**os.environ, 'WARM_MARKER': 'grandchild'}, check=False)\n"
        "print(done.returncode, done.stdout.strip(), os.getpid())\n"
    )
    seen = {}
    for warm in (True, False):
        done = warm_children.run(
            [sys.executable, "-c", program, str(script)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            warm_python=warm,
        )
        code, marker, preloaded, pid, parent = done.stdout.split()
        assert (code, marker) == ("7", "grandchild"), done.stdout
        assert pid != parent
        seen[warm] = preloaded
    assert seen == {True: "True", False: "False"}
