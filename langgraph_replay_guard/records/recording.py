"""Recording graph runs as execution records, and serving them again (`guard.record(graph)`)."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.load import dumpd, load
from langchain_core.load.serializable import Serializable
from langchain_core.outputs import ChatGeneration, LLMResult
from langgraph.errors import GraphBubbleUp
from langgraph.types import Command, Interrupt
from pydantic import BaseModel

from langgraph_replay_guard.errors import ReplayGuardError
from langgraph_replay_guard.integrations.calls import DECISION_EVENT
from langgraph_replay_guard.integrations.tracing import TRACE_KEY
from langgraph_replay_guard.records.engine import ReplayEngine, ReplayResult, load_record
from langgraph_replay_guard.records.envelope import ENVELOPE_ROUTING_FIELDS, compute_envelope_hash
from langgraph_replay_guard.records.model import (
    ExecutionRecord,
    FinalResponse,
    RecordedError,
    RecordEvent,
    RecordHeader,
    utc_now_iso,
)
from langgraph_replay_guard.storage.ledger_io import arun_plan, run_plan

if TYPE_CHECKING:
    from uuid import UUID

    from langchain_core.runnables import RunnableConfig

    from langgraph_replay_guard.records.store import RecordStore, RecordStorePlan

__all__ = ["RecordedGraph", "RecordingHandler", "build_envelope", "revive", "to_json"]

logger = logging.getLogger("langgraph_replay_guard")

# invoke() options that change the result (the others, like durability, only route it).
_DECIDING_OPTIONS = (
    "context",
    "interrupt_after",
    "interrupt_before",
    "output_keys",
    "stream_mode",
    "version",
)


class UnrecordableValueError(ValueError):
    """A value has no faithful JSON form, so it cannot go into a record."""


# -- JSON forms of inputs and outputs ------------------------------------------------------


def to_json(value: Any, *, path: str = "value") -> Any:
    """The JSON form of a graph input or output, as stored in records.

    LangChain objects (messages, documents) use LangChain's serialization (`dumpd`), which
    `revive` turns back into objects; `Interrupt` and `Command` get tagged forms; other
    pydantic models and dataclasses become their fields (revived as plain data).

    Args:
        value: The value.
        path: Where the value is, for error messages.

    Returns:
        JSON data.

    Raises:
        UnrecordableValueError: For values with no faithful JSON form (an open connection,
            a function...), naming where they are.
    """
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, Mapping):
        return {str(k): to_json(v, path=f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v, path=f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Serializable) and value.is_lc_serializable():
        data = dumpd(value)
        _check_serialized(data, path)
        return data
    if isinstance(value, Interrupt):
        return {"$interrupt": {"value": to_json(value.value, path=f"{path}.value"), "id": value.id}}
    if isinstance(value, Command):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"$command": to_json(fields, path=path)}
    if isinstance(value, BaseModel):
        try:
            data = value.model_dump(mode="json")
        except Exception as exc:  # a field pydantic cannot serialize
            msg = f"{path} is a {type(value).__qualname__} that has no JSON form: {exc}"
            raise UnrecordableValueError(msg) from exc
        return to_json(data, path=path)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return to_json(fields, path=path)
    msg = (
        f"{path} is a {type(value).__module__}.{type(value).__qualname__}, which has no JSON "
        "form: a record cannot hold it"
    )
    raise UnrecordableValueError(msg)


def _check_serialized(data: Any, path: str) -> None:
    """Reject LangChain's `not_implemented` placeholders (a lossy `repr` of an object)."""
    if isinstance(data, dict):
        if data.get("lc") == 1 and data.get("type") == "not_implemented":
            name = ".".join(str(p) for p in data.get("id", []))
            msg = f"{path} holds a {name}, which LangChain cannot serialize"
            raise UnrecordableValueError(msg)
        for key, item in data.items():
            _check_serialized(item, f"{path}.{key}")
    elif isinstance(data, list):
        for index, item in enumerate(data):
            _check_serialized(item, f"{path}[{index}]")


def revive(data: Any) -> Any:
    """Turn a recorded JSON form back into objects (messages, interrupts).

    Only `langchain_core` classes are revived (a record read from a database is not
    trusted to name other classes).

    Args:
        data: JSON data from a record (`ReplayResult.payload`).

    Returns:
        The value, with LangChain objects and interrupts rebuilt.
    """
    if isinstance(data, list):
        return [revive(item) for item in data]
    if not isinstance(data, dict):
        return data
    if data.get("lc") == 1 and data.get("type") == "constructor":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `load` is marked beta
            return load(data, allowed_objects="core")
    if set(data) == {"$interrupt"} and isinstance(data["$interrupt"], dict):
        inner = data["$interrupt"]
        return Interrupt(value=revive(inner.get("value")), id=str(inner.get("id")))
    return {key: revive(value) for key, value in data.items()}


def _strip_message_ids(data: Any) -> Any:
    """Drop message ids from a serialized input: LangGraph assigns random ones in place."""
    if isinstance(data, list):
        return [_strip_message_ids(item) for item in data]
    if not isinstance(data, dict):
        return data
    if data.get("lc") == 1 and data.get("type") == "constructor":
        kwargs = data.get("kwargs")
        if isinstance(kwargs, dict) and "id" in kwargs and "messages" in data.get("id", []):
            return {**data, "kwargs": {k: v for k, v in kwargs.items() if k != "id"}}
        return data
    return {key: _strip_message_ids(value) for key, value in data.items()}


def build_envelope(
    graph_name: str | None,
    input: Any,
    config: RunnableConfig | None = None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The envelope of a graph call: what decides its result.

    The input (message ids left out: LangGraph assigns random ones to the caller's message
    objects), the graph's name, the `configurable` values that are JSON data (routing
    values such as `thread_id` left out, see `ENVELOPE_ROUTING_FIELDS`), `recursion_limit`,
    and the invoke options that change the result (`context`, `interrupt_before`...).

    Args:
        graph_name: The graph's name.
        input: The input given to `invoke`.
        config: The config given to `invoke`.
        options: Other keyword arguments given to `invoke`.

    Returns:
        The envelope.

    Raises:
        UnrecordableValueError: The input or a deciding option has no JSON form.
    """
    config = config or {}
    configurable: dict[str, Any] = {}
    skipped: list[str] = []
    for key, value in (config.get("configurable") or {}).items():
        if key in ENVELOPE_ROUTING_FIELDS or str(key).startswith("__"):
            continue
        try:
            configurable[str(key)] = to_json(value, path=f"configurable.{key}")
        except UnrecordableValueError:
            skipped.append(str(key))  # an injected object (a client, a connection)
    run_config: dict[str, Any] = {"configurable": configurable}
    if "recursion_limit" in config:
        run_config["recursion_limit"] = config["recursion_limit"]
    if skipped:
        run_config["unhashed_configurable"] = sorted(skipped)
    envelope: dict[str, Any] = {
        "graph": graph_name,
        "input": _strip_message_ids(to_json(input, path="input")),
        "config": run_config,
    }
    chosen = {k: v for k, v in (options or {}).items() if k in _DECIDING_OPTIONS}
    if chosen:
        envelope["options"] = to_json(chosen, path="options")
    return envelope


def _describe(value: Any, path: str, warnings_out: list[str]) -> Any:
    """JSON for an event field; a value with no JSON form becomes a marker and a warning."""
    try:
        return to_json(value, path=path)
    except UnrecordableValueError as exc:
        warnings_out.append(str(exc))
        return {"$unrecordable": f"{type(value).__module__}.{type(value).__qualname__}"}


# -- collecting events ---------------------------------------------------------------------

_COUNTED = {"model_start": "model", "tool_start": "tool", "guard_decision": "decision"}


class RecordingHandler(BaseCallbackHandler):
    """Collects one run's model calls, tool calls and guard decisions as record events.

    Registered on the run's callbacks by `RecordedGraph`. Thread-safe (parallel tool
    calls); never raises into the run: a failure is noted in `failures` and the record
    becomes `recording_failure`.
    """

    run_inline = True  # cheap appends: no thread hop in async runs
    raise_error = False

    def __init__(self) -> None:
        """Create an empty collector."""
        super().__init__()
        self.events: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self.warnings: list[str] = []
        self.counts = {"model": 0, "tool": 0, "decision": 0}
        self._tool_names: dict[str, str] = {}
        self._skipped_runs: set[str] = set()  # tool runs the guard reported, not executions
        self._lock = threading.Lock()
        self._start = time.perf_counter()

    def _add(self, kind: str, fields: dict[str, Any]) -> None:
        elapsed = round((time.perf_counter() - self._start) * 1000, 3)
        with self._lock:
            counter = _COUNTED.get(kind)
            if counter is not None:
                self.counts[counter] += 1
            self.events.append(
                {
                    "seq": len(self.events) + 1,
                    "kind": kind,
                    "elapsedMs": elapsed,
                    **{k: v for k, v in fields.items() if k not in ("seq", "kind")},
                }
            )

    def snapshot(self) -> list[dict[str, Any]]:
        """The events so far, in order."""
        with self._lock:
            return list(self.events)

    def _guarded(self, kind: str, build: Any) -> None:
        try:
            self._add(kind, build())
        except Exception as exc:  # a recording bug must never break the user's run
            logger.warning("langgraph-replay-guard: could not record a %s event: %s", kind, exc)
            self.failures.append(f"could not record a {kind} event: {exc}")

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        """Record a chat model call."""
        self._model_start(
            serialized, run_id, kwargs, "messages", lambda: len(messages[0]) if messages else 0
        )

    def on_llm_start(
        self, serialized: dict[str, Any], prompts: list[str], *, run_id: UUID, **kwargs: Any
    ) -> None:
        """Record a (non-chat) LLM call."""
        self._model_start(serialized, run_id, kwargs, "prompts", lambda: len(prompts))

    def _model_start(
        self,
        serialized: dict[str, Any],
        run_id: UUID,
        kwargs: Mapping[str, Any],
        inputs: str,
        count: Callable[[], int],
    ) -> None:
        """Record a model call: its run, its model and how many `inputs` it was given."""
        self._guarded(
            "model_start",
            lambda: {
                "runId": str(run_id),
                "model": _model_name(serialized, kwargs),
                inputs: count(),
            },
        )

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        """Record what the model answered."""

        def build() -> dict[str, Any]:
            generation = response.generations[0][0] if response.generations else None
            if isinstance(generation, ChatGeneration):
                output: Any = generation.message
            else:
                output = generation.text if generation is not None else None
            return {
                "runId": str(run_id),
                "output": _describe(output, "model output", self.warnings),
            }

        self._guarded("model_end", build)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a failed model call."""
        self._guarded(
            "model_error",
            lambda: {
                "runId": str(run_id),
                "error": RecordedError.from_exception(error).model_dump(),
            },
        )

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """Record a tool call that runs."""
        traced = (kwargs.get("metadata") or {}).get(TRACE_KEY)
        if isinstance(traced, Mapping) and traced.get("verdict") != "allow":
            # The guard's report of a call it answered without running the tool: not a tool
            # execution (its decision is recorded from the decision event).
            self._skipped_runs.add(str(run_id))
            return
        name = str(serialized.get("name") or kwargs.get("name") or "")
        self._tool_names[str(run_id)] = name
        self._guarded(
            "tool_start",
            lambda: {
                "runId": str(run_id),
                "name": name,
                "toolCallId": kwargs.get("tool_call_id"),
                "args": _describe(inputs if inputs is not None else input_str, name, self.warnings),
            },
        )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Record what a tool returned."""
        if str(run_id) in self._skipped_runs:
            self._skipped_runs.discard(str(run_id))
            return
        name = self._tool_names.get(str(run_id), "")
        self._guarded(
            "tool_end",
            lambda: {
                "runId": str(run_id),
                "name": name,
                "output": _describe(output, f"{name} output", self.warnings),
            },
        )

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a tool that raised."""
        if str(run_id) in self._skipped_runs:
            self._skipped_runs.discard(str(run_id))
            return
        self._guarded(
            "tool_error",
            lambda: {
                "runId": str(run_id),
                "name": self._tool_names.get(str(run_id), ""),
                "error": RecordedError.from_exception(error).model_dump(),
            },
        )

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """Record a guard decision (the guard sends each non-allow decision as an event)."""
        if name != DECISION_EVENT or not isinstance(data, Mapping):
            return
        self._guarded(
            "guard_decision",
            lambda: {
                "tool": data.get("tool"),
                "toolCallId": data.get("tool_call_id"),
                "verdict": data.get("verdict"),
                "reason": data.get("reason"),
                "count": data.get("count"),
            },
        )


def _model_name(serialized: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> str:
    if kwargs.get("name"):
        return str(kwargs["name"])
    if serialized:
        if serialized.get("name"):
            return str(serialized["name"])
        ids = serialized.get("id")
        if isinstance(ids, list) and ids:
            return str(ids[-1])
    return ""


# -- one recorded run -----------------------------------------------------------------------


class _RecordedInvoke:
    """Records one `invoke`: the started record, the events, the final record."""

    def __init__(
        self,
        records: RecordStore,
        graph_name: str | None,
        input: Any,
        config: RunnableConfig | None,
        options: Mapping[str, Any],
    ) -> None:
        run_config: dict[str, Any] = dict(config or {})
        run_id = run_config.get("run_id")
        # Chunks of an earlier record with this id: none for a new id; unknown (read them)
        # when the caller chose the id.
        self.stored_chunks: int | None = None if run_id is not None else 0
        if run_id is None:
            run_id = uuid.uuid4()
            run_config["run_id"] = run_id  # the record id is the trace's run id too
        self.execution_id = str(run_id)
        self.records = records
        self.graph_name = graph_name
        self.thread_id = (run_config.get("configurable") or {}).get("thread_id")
        self.failures: list[str] = []
        self.created = utc_now_iso()
        self.started_at = time.perf_counter()
        self.handler = RecordingHandler()
        try:
            self.envelope = build_envelope(graph_name, input, config, options)
            self.envelope_hash = compute_envelope_hash(self.envelope)
        except Exception as exc:
            self._fail(f"the request cannot be recorded: {exc}")
            self.envelope = {"graph": graph_name, "unrecordable": str(exc)}
            self.envelope_hash = compute_envelope_hash(self.envelope)
        run_config["callbacks"] = _with_handler(run_config.get("callbacks"), self.handler)
        self.config: RunnableConfig = run_config  # type: ignore[assignment]

    def _fail(self, problem: str) -> None:
        logger.warning("langgraph-replay-guard: recording %s: %s", self.execution_id, problem)
        self.failures.append(problem)

    def started_record(self) -> ExecutionRecord:
        return ExecutionRecord(
            header=self._header(False, "execution_incomplete"), envelope=self.envelope
        )

    def _header(self, replayable: bool, reason: str | None) -> RecordHeader:
        return RecordHeader(
            executionId=self.execution_id,
            createdUtcIso=self.created,
            envelopeHash=self.envelope_hash,
            replayable=replayable,
            replayableReason=reason,  # type: ignore[arg-type]
        )

    def _metadata(self, interrupted: bool) -> dict[str, Any]:
        handler = self.handler
        metadata: dict[str, Any] = {
            "completedUtcIso": utc_now_iso(),
            "durationMs": round((time.perf_counter() - self.started_at) * 1000, 3),
            "graph": self.graph_name,
            "threadId": None if self.thread_id is None else str(self.thread_id),
            "modelCalls": handler.counts["model"],
            "toolCalls": handler.counts["tool"],
            "guardDecisions": handler.counts["decision"],
        }
        if interrupted:
            metadata["interrupted"] = True
        problems = [*self.failures, *handler.failures]
        if problems:
            metadata["recordingProblems"] = problems
        if handler.warnings:
            metadata["recordingWarnings"] = handler.warnings[:20]
        return metadata

    def final_record(
        self, output: Any = None, error: BaseException | None = None
    ) -> ExecutionRecord:
        payload: Any = None
        if error is None:
            try:
                payload = to_json(output, path="output")
            except Exception as exc:
                self._fail(f"the response cannot be recorded: {exc}")
        interrupted = isinstance(output, Mapping) and "__interrupt__" in output
        reason: str | None = None
        if self.failures or self.handler.failures:
            reason = "recording_failure"
        elif interrupted:
            reason = "execution_incomplete"  # waiting for a human: no final response yet
        events = [RecordEvent.model_validate(e) for e in self.handler.snapshot()]
        return ExecutionRecord(
            header=self._header(reason is None, reason),
            envelope=self.envelope,
            events=events,
            finalResponse=FinalResponse(
                payload=payload,
                metadata=self._metadata(interrupted),
                error=None if error is None else RecordedError.from_exception(error),
            ),
        )

    # Writing never raises: the user's run matters more than its record.

    def write_plan(
        self, record_of: Callable[[], ExecutionRecord], what: str
    ) -> RecordStorePlan[None]:
        """Save the record `record_of()` builds; a failure is noted, never raised."""
        try:
            record = record_of()
            self.stored_chunks = yield from self.records.put_plan(
                record, previous_chunks=self.stored_chunks
            )
        except Exception as exc:
            self.stored_chunks = None  # unknown now: read before the next write
            self._fail(f"could not write the {what} record: {exc}")


@dataclasses.dataclass(frozen=True)
class _Invoke:
    """Run the recorded graph once (the plan's one op that is not a store op)."""

    input: Any
    config: Any
    kwargs: Mapping[str, Any]


def _with_handler(callbacks: Any, handler: BaseCallbackHandler) -> Any:
    """The run's callbacks plus the recorder (a list, or a copy of a manager)."""
    if callbacks is None:
        return [handler]
    if isinstance(callbacks, list):
        return [*callbacks, handler]
    if isinstance(callbacks, BaseCallbackManager):
        manager = callbacks.copy()
        manager.add_handler(handler, inherit=True)
        return manager
    msg = f"config['callbacks'] must be a list or a callback manager, got {type(callbacks)!r}"
    raise TypeError(msg)


# -- the wrapper ----------------------------------------------------------------------------


class RecordedGraph:
    """A compiled graph whose `invoke`/`ainvoke` runs are recorded as execution records.

    Built by `guard.record(graph)`. `invoke` returns exactly what the graph returns and
    raises what it raises; the record is written before the run (`execution_incomplete`)
    and after it. The record's id is the run id: pass `config={"run_id": ...}` to choose
    it, otherwise a new one is made (`last_execution_id` tells it). A run that crashes or
    is killed stays `execution_incomplete`; a run interrupted for a human too (the resume
    is a new run). A recording problem marks the record `recording_failure` and never
    breaks the run. Other attributes (`get_state`, `stream`...) are the graph's own;
    `stream` and `astream` are not recorded.

    Args:
        graph: The compiled graph (or any runnable).
        records: Where records are saved.
    """

    def __init__(self, graph: Any, records: RecordStore) -> None:
        """Wrap a graph."""
        self.graph = graph
        self.records = records
        self.last_execution_id: str | None = None

    @property
    def name(self) -> str | None:
        """The graph's name (part of every envelope)."""
        name = getattr(self.graph, "name", None)
        return None if name is None else str(name)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Run the graph and record the run (same arguments and result as the graph's).

        Raises:
            Exception: Whatever the graph raises (the record keeps it as the response).
        """

        def run(op: _Invoke) -> Any:
            return self.graph.invoke(op.input, op.config, **op.kwargs)

        return run_plan(self.records.store, self._run_plan(input, config, kwargs), run)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Async `invoke`."""

        async def run(op: _Invoke) -> Any:
            return await self.graph.ainvoke(op.input, op.config, **op.kwargs)

        return await arun_plan(self.records.store, self._run_plan(input, config, kwargs), run)

    def _run_plan(
        self, input: Any, config: RunnableConfig | None, kwargs: Mapping[str, Any]
    ) -> Generator[Any, Any, Any]:
        """Record the start, run the graph, record the end: one plan for both drivers."""
        run = _RecordedInvoke(self.records, self.name, input, config, dict(kwargs))
        self.last_execution_id = run.execution_id
        yield from run.write_plan(run.started_record, "started")
        try:
            output = yield _Invoke(input, run.config, kwargs)
        except GraphBubbleUp as exc:
            if not isinstance(exc, ReplayGuardError):
                raise  # an interrupt of an enclosing graph: this run has not finished
            # The guard's own stops travel as control-flow signals: the run ended with them.
            yield from run.write_plan(functools.partial(run.final_record, error=exc), "final")
            raise
        except Exception as exc:
            yield from run.write_plan(functools.partial(run.final_record, error=exc), "final")
            raise
        yield from run.write_plan(functools.partial(run.final_record, output), "final")
        return output

    def envelope(
        self, input: Any, config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """The envelope `invoke(input, config, **kwargs)` would record (to check a replay)."""
        return build_envelope(self.name, input, config, kwargs)

    def replay_result(
        self,
        execution_id: str,
        input: Any = None,
        config: RunnableConfig | None = None,
        *,
        force: bool = False,
        **kwargs: Any,
    ) -> ReplayResult:
        """Serve a recorded run's response again without running anything.

        Args:
            execution_id: The record's id.
            input: When given, the request must be the recorded one (same envelope hash).
            config: The request's config (with `input`).
            force: Serve a non-replayable record anyway (see `ReplayEngine.replay`).
            **kwargs: The request's invoke options (with `input`).

        Returns:
            The `ReplayResult`; its `payload` is the recorded JSON form.

        Raises:
            RecordNotFoundError: No record has this id.
            NotReplayableError: The record is not replayable and `force` is False.
            ReplayHashMismatchError: `input` differs from the recorded request.
            ReplayedRunError: The recorded run raised: so does its replay.
        """
        record = load_record(self.records, execution_id)
        env = None if input is None else self.envelope(input, config, **kwargs)
        return ReplayEngine(record).replay(env, force=force)

    def replay(
        self,
        execution_id: str,
        input: Any = None,
        config: RunnableConfig | None = None,
        *,
        force: bool = False,
        **kwargs: Any,
    ) -> Any:
        """What `invoke` returned in the recorded run (messages rebuilt), without running.

        Arguments and errors as in `replay_result`.
        """
        return revive(
            self.replay_result(execution_id, input, config, force=force, **kwargs).payload
        )

    def __getattr__(self, name: str) -> Any:
        """Everything else is the graph's."""
        return getattr(self.graph, name)
