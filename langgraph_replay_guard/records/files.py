"""Execution records in JSON files: IntentusNet's `records/` folder, or records saved by hand."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from langgraph_replay_guard import json_depth
from langgraph_replay_guard.errors import ReplayGuardError
from langgraph_replay_guard.records.model import (
    ExecutionRecord,
    RecordNotFoundError,
    first_validation_error,
)

__all__ = ["RecordFileError", "RecordFiles", "read_record_file", "record_file_paths"]


class RecordFileError(ReplayGuardError, ValueError):
    """A record file that cannot be read, is not JSON, or does not hold a valid record.

    Attributes:
        path: The file (or the missing path).
    """

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


def read_record_file(
    path: str | os.PathLike[str], *, max_bytes: int | None = None
) -> ExecutionRecord:
    """Load one execution record from a JSON file, as it is (nothing is rewritten).

    The file may be one of this package's records (`record.to_json_data()` saved as JSON) or
    one IntentusNet wrote (its `FileExecutionStore`: `<executionId>.json`): a bare SHA-256
    `envelopeHash` and a `finalResponse.status` of `"ok"` load.

    Args:
        path: The file.
        max_bytes: A file bigger than this is not read (None: no limit).

    Returns:
        The record.

    Raises:
        RecordFileError: The file cannot be read, is bigger than `max_bytes`, is not JSON,
            or is not a valid record; the message names the file and the first problem (an
            unknown `finalResponse.status` is named with the accepted ones).
    """
    file = Path(path)
    try:
        size = file.stat().st_size
        if max_bytes is not None and size > max_bytes:
            msg = (
                f"the record file {str(file)!r} is {size} bytes, above the limit of "
                f"{max_bytes} bytes (--max-record-bytes): not read"
            )
            raise RecordFileError(msg, path=file)
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        msg = f"cannot read the record file {str(file)!r}: {exc}"
        raise RecordFileError(msg, path=file) from exc
    try:
        data = json_depth.loads(text)
    except json_depth.JSONNestingError as exc:
        msg = f"the record file {str(file)!r} is not a record: {exc}"
        raise RecordFileError(msg, path=file) from None
    except ValueError as exc:
        msg = f"the record file {str(file)!r} is not JSON: {exc}"
        raise RecordFileError(msg, path=file) from exc
    try:
        return ExecutionRecord.model_validate(data)
    except ValidationError as exc:
        problem = first_validation_error(exc)
        msg = f"the record file {str(file)!r} is not a valid execution record: {problem}"
        raise RecordFileError(msg, path=file) from exc


def record_file_paths(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The record files named: each file as given, each directory's `*.json` files by name.

    Args:
        paths: Files and directories (IntentusNet's `records/` folder holds one
            `<executionId>.json` per run).

    Returns:
        The files, in order, each once.

    Raises:
        RecordFileError: A path does not exist.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.glob("*.json") if p.is_file())
        elif path.exists():
            found = [path]
        else:
            msg = f"no record file or directory {str(path)!r}"
            raise RecordFileError(msg, path=path)
        files.extend(p for p in found if p not in files)
    return files


class RecordFiles:
    """Records read from JSON files, by id (a `RecordSource`, as `ReplayEngine` tools take).

    Files are read when first needed and kept. `get(id)` looks at `<id>.json` first (how
    IntentusNet names them), then at every other file.

    Example:
        ```python
        files = RecordFiles(["examples/execution_replay_example/records"])
        for path, record in files.entries():
            ...  # a record, or the RecordFileError that kept the file from loading
        ```

    Args:
        paths: Record files and directories of them.
        max_bytes: A file bigger than this is not read: it is a `RecordFileError` (None: no
            limit).

    Raises:
        RecordFileError: A path does not exist.
    """

    def __init__(
        self, paths: Iterable[str | os.PathLike[str]], *, max_bytes: int | None = None
    ) -> None:
        """Find the files (they are read later, when needed)."""
        self.paths = record_file_paths(paths)
        self.max_bytes = max_bytes
        self._loaded: dict[Path, ExecutionRecord | RecordFileError] = {}

    def _entry(self, path: Path) -> ExecutionRecord | RecordFileError:
        if path not in self._loaded:
            try:
                self._loaded[path] = read_record_file(path, max_bytes=self.max_bytes)
            except RecordFileError as exc:
                self._loaded[path] = exc
        return self._loaded[path]

    def load(self, path: Path) -> ExecutionRecord:
        """The record of one of the files.

        Raises:
            RecordFileError: The file does not hold a valid record.
        """
        entry = self._entry(path)
        if isinstance(entry, RecordFileError):
            raise entry
        return entry

    def entries(self) -> list[tuple[Path, ExecutionRecord | RecordFileError]]:
        """Every file with its record, or the error that kept it from loading."""
        return [(path, self._entry(path)) for path in self.paths]

    def get(self, execution_id: str) -> ExecutionRecord | None:
        """The record with this `executionId`, or None (files that do not load are skipped).

        Raises:
            RecordFileError: The file named `<execution_id>.json` does not hold a valid record.
        """
        named = [p for p in self.paths if p.stem == execution_id]
        for path in named + [p for p in self.paths if p not in named]:
            entry = self.load(path) if path in named else self._entry(path)
            if isinstance(entry, ExecutionRecord) and entry.execution_id == execution_id:
                return entry
        return None

    def pick(self, execution_id: str | None) -> ExecutionRecord:
        """The record to show or replay: by id, or the only file's when no id is given.

        Args:
            execution_id: The record's id; None when a single file was given.

        Returns:
            The record.

        Raises:
            RecordNotFoundError: No file holds this id.
            RecordFileError: No id was given and there is not exactly one file, or the file
                does not hold a valid record.
        """
        if execution_id is None:
            if len(self.paths) != 1:
                names = ", ".join(p.name for p in self.paths) or "none"
                msg = (
                    f"{len(self.paths)} record files ({names}): give the id of the record "
                    "(the file name without .json for IntentusNet's)"
                )
                raise RecordFileError(msg, path=Path())
            return self.load(self.paths[0])
        record = self.get(execution_id)
        if record is None:
            msg = (
                f"No execution record {execution_id!r} in the {len(self.paths)} record "
                "file(s) given."
            )
            raise RecordNotFoundError(msg, execution_id=execution_id)
        return record
