"""Bookkeeping of the callback handler: the run tree, per-thread scopes and their storage."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from uuid import UUID

from langgraph_replay_guard.decisions.state import StateUpdate, load_state, merge_guard_state
from langgraph_replay_guard.replay.ledger import store_label
from langgraph_replay_guard.storage import store_cas

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

    from langgraph_replay_guard.integrations.callbacks.decisions import Admitted
    from langgraph_replay_guard.integrations.calls import BatchDecisions

__all__ = ["RunInfo", "RunTree", "Scope", "ScopeKey", "ScopeTable", "scopes_namespace"]

logger = logging.getLogger("langgraph_replay_guard")

ScopeKey = tuple[str, str]
"""`("thread", thread_id)`, or `("run", root_run_id)` for a run without a thread id."""


def scopes_namespace(prefix: Sequence[str]) -> tuple[str, ...]:
    """Where the handler keeps its per-thread state: `(*prefix, "callbacks")`.

    The prefix is the guard's `namespace`, as for the ledger and the records, so that a
    tenant's callback state sits beside its other rows; its parts are escaped like theirs.

    Args:
        prefix: The guard's namespace, e.g. `("replay_guard", "tenant-42")`.

    Returns:
        The store namespace (the item key is the thread id).
    """
    return (*(store_label(part) for part in prefix), "callbacks")


MAX_OPEN_RUNS = 10_000
"""Most runs tracked at once; runs that never report their end are forgotten oldest first."""


@dataclass(slots=True)
class RunInfo:
    """What the handler knows about one started run."""

    scope: ScopeKey
    root: UUID
    inside_tool: bool
    """The run is a tool run or runs inside one (a tool that calls a model or a tool)."""
    call: Admitted | None = None
    """For a guarded tool run that was let through: what to record when it ends."""


class RunTree:
    """Root run, scope and tool nesting of every started run, bounded.

    Callbacks only get a run's id and its parent's id; `on_*_end` events carry no metadata.
    The tree remembers, from each start, which scope and root the run belongs to.
    Thread-safe: parallel tool calls report from several threads.
    """

    def __init__(self, cap: int = MAX_OPEN_RUNS) -> None:
        """Create an empty tree."""
        self._runs: OrderedDict[UUID, RunInfo] = OrderedDict()
        self._cap = cap
        self._lock = threading.Lock()

    def start(
        self,
        run_id: UUID,
        parent_run_id: UUID | None,
        metadata: Mapping[str, Any] | None,
        *,
        tool: bool = False,
    ) -> tuple[RunInfo, bool]:
        """Register a started run.

        Args:
            run_id: The run.
            parent_run_id: Its parent, if any.
            metadata: The run's metadata (`thread_id` names its scope).
            tool: Whether the run is a tool run.

        Returns:
            The run's info and whether its parent runs inside a tool.
        """
        with self._lock:
            parent = self._runs.get(parent_run_id) if parent_run_id is not None else None
        if parent is not None:
            root = parent.root
        else:
            # An unknown parent (its start was not seen) is the best guess for the root.
            root = parent_run_id if parent_run_id is not None else run_id
        thread = metadata.get("thread_id") if metadata else None
        if thread is not None:
            scope: ScopeKey = ("thread", str(thread))
        elif parent is not None:
            scope = parent.scope
        else:
            scope = ("run", str(root))
        nested = parent is not None and parent.inside_tool
        info = RunInfo(scope=scope, root=root, inside_tool=nested or tool)
        with self._lock:
            self._runs[run_id] = info
            if len(self._runs) > self._cap:
                self._runs.popitem(last=False)
        return info, nested

    def end(self, run_id: UUID) -> RunInfo | None:
        """Forget a run that ended and return its info."""
        with self._lock:
            return self._runs.pop(run_id, None)


@dataclass(eq=False)
class Scope:
    """The guard of one thread (or of one run without a thread id)."""

    key: ScopeKey
    lock: threading.RLock = field(default_factory=threading.RLock)
    value: Any = None
    """The guard state, in the channel's format; replaced on every write, never mutated."""
    turn: str | None = None
    """Id of the user message of the model call seen last."""
    plan: BatchDecisions | None = None
    """Decisions for the batch of tool calls the model asked for last."""
    executor: bool = False
    """The plan came from an `AgentExecutor` step (its refusals were raised already)."""
    actions: object | None = None
    """The first `AgentAction` of the executor step planned last, to plan each step once."""
    last_batch: str | None = None
    """Id of the latest batch of tool calls; None once the model answered without tools."""
    taken: set[int] = field(default_factory=set)
    """Positions in the plan already claimed by a started tool run."""
    recorded: set[int] = field(default_factory=set)
    """Positions in the plan already recorded when it was made (calls to unknown tools)."""
    shown: tuple[Any, ...] | None = None
    """The reminder `reminder()` returned last, so that it is returned once."""
    model_seen: bool = False
    """A chat model call was seen: results go to a model next, and a middleware may change
    them before it (`PIIMiddleware`); their previews wait for that call (`unshown`)."""
    unshown: dict[str, str] = field(default_factory=dict)
    """Result digest -> preview of results recorded since, in this process only (never
    stored): the next model call writes those its messages still hold."""


class ScopeTable:
    """Scopes by key: least recently used threads evicted, optionally kept in a `BaseStore`.

    With a store, a thread's guard state is read from it before every decision and written
    after every record, so processes sharing the store share the state; the table then
    only caches. Runs without a thread id are never stored (nothing else can see them).
    The table is a cache: what protects a side effect (the unknown outcomes) is kept by
    `CallbackDecider` outside it too, never only here.

    Args:
        max_threads: Most scopes kept in memory.
        store: Optional LangGraph store.
        namespace: Store namespace of the scopes (`scopes_namespace(prefix)`); the item
            key is the thread id.
    """

    def __init__(
        self,
        max_threads: int,
        store: BaseStore | None,
        namespace: tuple[str, ...],
    ) -> None:
        """Create an empty table."""
        self._scopes: OrderedDict[ScopeKey, Scope] = OrderedDict()
        self._lock = threading.Lock()
        self._max = max_threads
        self.store = store
        self.namespace = namespace

    def get(self, key: ScopeKey) -> Scope:
        """The scope of a key, created when new; marks it most recently used."""
        with self._lock:
            scope = self._scopes.get(key)
            if scope is None:
                scope = self._scopes[key] = Scope(key)
                while len(self._scopes) > self._max:
                    self._scopes.popitem(last=False)
            else:
                self._scopes.move_to_end(key)
            return scope

    def peek(self, key: ScopeKey) -> Scope | None:
        """The scope of a key if it is in memory, without creating it."""
        with self._lock:
            return self._scopes.get(key)

    @property
    def max_threads(self) -> int:
        """Most scopes kept in memory."""
        return self._max

    def stored(self, key: ScopeKey) -> bool:
        """Whether the scope's state is kept in the store (a thread, with a store)."""
        return self.store is not None and key[0] == "thread"

    def __len__(self) -> int:
        """Number of scopes in memory."""
        with self._lock:
            return len(self._scopes)

    def read(self, scope: Scope) -> Any:
        """The scope's guard state (from the store when there is one).

        Call with `scope.lock` held.
        """
        if self.store is not None and scope.key[0] == "thread":
            store_cas.prepare(self.store)
            item = self.store.get(self.namespace, scope.key[1])
            scope.value = item.value if item is not None else None
        return scope.value

    def read_thread(self, thread_id: str) -> Any:
        """The stored or cached guard state of a thread, without creating its scope."""
        scope = self.peek(("thread", thread_id))
        if scope is not None:
            with scope.lock:
                return self.read(scope)
        if self.store is not None:
            store_cas.prepare(self.store)
            item = self.store.get(self.namespace, thread_id)
            return item.value if item is not None else None
        return None

    def write(self, scope: Scope, update: StateUpdate | dict[str, Any]) -> None:
        """Fold an update (events, or a `show_update`) into the scope's guard state.

        Read, merge, write back.

        Call with `scope.lock` held.
        """
        self._put(scope, merge_guard_state(self.read(scope), update))

    def write_field(self, scope: Scope, name: str, field_value: Any) -> None:
        """Set a field the handler keeps beside the guard state (the unknown outcomes).

        The guard-state reducer copies fields it does not know, so the field survives
        later event writes. Call with `scope.lock` held.
        """
        value = load_state(self.read(scope))
        value[name] = field_value
        self._put(scope, value)

    def _put(self, scope: Scope, value: dict[str, Any]) -> None:
        scope.value = value
        if self.store is not None and scope.key[0] == "thread":
            store_cas.prepare(self.store)
            self.store.put(self.namespace, scope.key[1], value)
