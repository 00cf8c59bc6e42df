"""Issue 27, item 16: `replay-guard --help` imports no framework, and the Makefile takes any
Python 3.11 or later."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from langgraph_replay_guard.cli.main import COMMANDS, build_parser

REPO_ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("langchain", "langchain_core", "langgraph", "pydantic", "langsmith")


def _imported_after(code: str) -> set[str]:
    """The top-level packages imported by running `code` in a fresh interpreter."""
    probe = f"""
import sys
{code}
print(",".join(sorted({{m.split(".")[0] for m in sys.modules}})), file=sys.stderr)
"""
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(result.stderr.strip().splitlines()[-1].split(","))


def test_help_imports_no_framework():
    loaded = _imported_after(
        "from langgraph_replay_guard.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    )
    assert not loaded & set(HEAVY), loaded & set(HEAVY)


def test_importing_the_package_is_lazy_and_every_public_name_still_resolves():
    assert not _imported_after("import langgraph_replay_guard") & set(HEAVY)
    import langgraph_replay_guard as package

    for name in package.__all__:
        assert getattr(package, name) is not None, name
    assert set(package.__all__) <= set(dir(package))
    assert package.records.RecordStore is package.RecordStore  # a submodule by attribute
    with pytest.raises(AttributeError):
        _ = package.no_such_name


def test_each_command_built_in_full_has_its_modules_description_and_runner():
    lazy = build_parser("")
    (lazy_sub,) = [a for a in lazy._actions if a.dest == "command"]
    assert {a.dest: a.help for a in lazy_sub._choices_actions} == COMMANDS
    for name in COMMANDS:
        module = importlib.import_module(f"langgraph_replay_guard.cli.{name}_cmd")
        (sub,) = [a for a in build_parser(name)._actions if a.dest == "command"]
        own = sub.choices[name]
        assert module.DESCRIPTION, name
        assert own.description == module.DESCRIPTION, name
        assert own.get_default("func") is module.run, name


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_the_makefile_takes_any_python_3_11_or_later(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)  # only `python3`, no python3.11
    result = subprocess.run(
        [shutil.which("make") or "make", "-s", "--eval", "show: ; $(info $(PYTHON))", "show"],
        cwd=REPO_ROOT,
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.stdout.strip() == "python3", result.stderr
