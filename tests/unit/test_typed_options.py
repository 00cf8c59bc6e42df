"""The constructors' typed options: one source of truth (GuardConfig), checked statically too."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from langgraph_replay_guard import (
    GuardConfig,
    ReplayGuard,
    ReplayGuardCallbackHandler,
    ReplayGuardMiddleware,
)

ROOT = Path(__file__).resolve().parents[2]


def _option_hints() -> dict[str, Any]:
    from langgraph_replay_guard.policy.config import GuardOptions

    assert GuardOptions.__total__ is False  # every option is optional: it has a default
    return typing.get_type_hints(GuardOptions)


CONSTRUCTORS = [ReplayGuard, ReplayGuardMiddleware, ReplayGuardCallbackHandler]


def _accepts(option: Any, field: Any) -> bool:
    """Whether every value of the field's type is a valid value of the option's type."""
    if option == field or option is Any:
        return True
    if isinstance(field, types.UnionType) or typing.get_origin(field) is typing.Union:
        return all(_accepts(option, arm) for arm in typing.get_args(field))
    if isinstance(option, types.UnionType) or typing.get_origin(option) is typing.Union:
        return any(_accepts(arm, field) for arm in typing.get_args(option))
    field_origin, option_origin = typing.get_origin(field), typing.get_origin(option)
    if field_origin is None or option_origin is None:
        return False
    if not (isinstance(field_origin, type) and isinstance(option_origin, type)):
        return False
    if not issubclass(field_origin, option_origin):
        return False
    field_args = [a for a in typing.get_args(field) if a is not Ellipsis]
    option_args = [a for a in typing.get_args(option) if a is not Ellipsis]
    return len(field_args) == len(option_args) and all(
        _accepts(o, f) for o, f in zip(option_args, field_args, strict=True)
    )


def test_guard_options_name_and_type_every_guard_config_field() -> None:
    hints = _option_hints()
    fields = GuardConfig.model_fields
    missing, extra = sorted(set(fields) - set(hints)), sorted(set(hints) - set(fields))
    assert not missing, f"add {missing} to GuardOptions (policy/config.py), typed as in GuardConfig"
    assert not extra, f"GuardOptions has {extra}, which GuardConfig does not: remove them"
    assert list(hints) == list(fields), "keep GuardOptions in GuardConfig's field order"
    for name, field in fields.items():
        assert _accepts(hints[name], field.annotation), (
            f"GuardOptions.{name}: {hints[name]} does not accept GuardConfig's {field.annotation}"
        )


@pytest.mark.parametrize("constructor", CONSTRUCTORS, ids=lambda c: c.__name__)
def test_each_constructor_takes_the_options_keyword_only_with_guard_configs_defaults(
    constructor: type,
) -> None:
    params = inspect.signature(constructor).parameters
    defaults = GuardConfig()
    for name, field in GuardConfig.model_fields.items():
        param = params[name]
        assert param.kind is inspect.Parameter.KEYWORD_ONLY, name
        assert param.default == getattr(defaults, name), name
        hint = _option_hints()[name]
        assert _accepts(hint, field.annotation), name
    assert not [p for p in params.values() if p.kind is inspect.Parameter.VAR_KEYWORD]


@pytest.mark.parametrize("constructor", CONSTRUCTORS, ids=lambda c: c.__name__)
def test_a_misspelled_option_is_a_type_error_naming_the_option_meant(constructor: type) -> None:
    with pytest.raises(TypeError) as caught:
        constructor(max_repeat=3)
    message = str(caught.value)
    assert f"{constructor.__name__}() got an unexpected keyword argument 'max_repeat'" in message
    assert "Did you mean 'max_repeats'?" in message
    assert "\n" not in message
    # And a correct one goes through, typed and validated.
    built = constructor(max_repeats=2, exit_behavior="error", tools={"send": "unsafe"})
    config = built.guard.config if isinstance(built, ReplayGuardMiddleware) else built.config
    assert (config.max_repeats, config.exit_behavior) == (2, "error")


def test_mypy_strict_flags_a_misspelled_option(tmp_path: Path, mypy_cache_dir: Path) -> None:
    snippet = tmp_path / "uses_the_guard.py"
    snippet.write_text(
        "from langgraph_replay_guard import ReplayGuard, ReplayGuardMiddleware\n"
        "from langgraph_replay_guard import ReplayGuardCallbackHandler\n"
        "ReplayGuard(max_repeat=3)\n"
        "ReplayGuardMiddleware(max_repeats=3, mode='shadows')\n"
        "ReplayGuardCallbackHandler(max_repeats='3')\n"
        "ReplayGuard(max_repeats=3, exit_behavior='error', tools={'send': 'unsafe'})\n",
        encoding="utf-8",
    )
    env = {**os.environ, "MYPYPATH": str(ROOT)}  # this checkout's package, not an installed one
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-error-summary",
            "--cache-dir",
            str(mypy_cache_dir),
            str(snippet),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert done.returncode == 1, done.stdout + done.stderr
    assert len(errors) == 3, done.stdout
    assert ':3: error: Unexpected keyword argument "max_repeat" for "ReplayGuard"' in errors[0]
    assert 'did you mean "max_repeats"' in errors[0]
    assert ":4: error:" in errors[1]
    assert '"mode"' in errors[1]
    assert ":5: error:" in errors[2]
    assert '"max_repeats"' in errors[2]


def _write(path: Path, data: dict[str, Any]) -> Path:
    if path.suffix == ".json":
        path.write_text(json.dumps(data), encoding="utf-8")
    else:
        import yaml

        path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_config_file_with_a_misspelled_key_names_the_key_meant(
    tmp_path: Path, suffix: str
) -> None:
    path = _write(tmp_path / f"guard{suffix}", {"max_repeat": 3})
    with pytest.raises(
        ValidationError,
        match=r"unknown option 'max_repeat' for GuardConfig\. "
        r"Did you mean 'max_repeats'\?",
    ):
        GuardConfig.from_file(path)
    nested = _write(
        tmp_path / f"nested{suffix}",
        {"tools": {"search": {"replay": "pure", "ignore_arg": ["ts"]}}},
    )
    with pytest.raises(
        ValidationError,
        match=r"unknown option 'ignore_arg' for ToolPolicy\. "
        r"Did you mean 'ignore_args'\?",
    ):
        GuardConfig.from_file(nested)


@pytest.mark.parametrize("option", ["--config", "--policy"])
def test_the_cli_names_the_key_meant_in_a_config_or_policy_file(
    tmp_path: Path, option: str
) -> None:
    data: dict[str, Any] = (
        {"max_repeat": 3}
        if option == "--config"
        else {"tools": {"search": {"replay": "pure", "volatil": True}}}
    )
    path = _write(tmp_path / "guard.yaml", data)
    runs = tmp_path / "runs.jsonl"
    runs.write_text(
        json.dumps({"id": "r1", "messages": [{"role": "user", "content": "hi"}]}) + "\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "langgraph_replay_guard.cli.main",
            "eval",
            str(runs),
            option,
            str(path),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "LANGSMITH_TRACING": "false"},
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    meant = "'max_repeats'" if option == "--config" else "'volatile'"
    assert f"Did you mean {meant}?" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_policy_file_with_a_misspelled_top_level_key_names_the_key_meant(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "tools.yaml", {"tool": {"send_email": "unsafe"}})
    with pytest.raises(ValueError, match=r"unknown keys \['tool'\]; Did you mean 'tools'\?"):
        GuardConfig().with_policies(path)
