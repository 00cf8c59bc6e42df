"""Checks of the constructors' options, and of the tool names a configuration gives policies."""

from __future__ import annotations

import difflib
import inspect
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from langgraph_replay_guard.errors import ReplayGuardWarning, UnclassifiedToolsWarning
from langgraph_replay_guard.policy.config import GuardConfig, GuardOptions, did_you_mean
from langgraph_replay_guard.policy.resolver import PolicyResolver, resolver_of
from langgraph_replay_guard.policy.tool_hints import replay_class_from_hints, tool_hints
from langgraph_replay_guard.policy.toolkit_data import known_toolkits, load_toolkit

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

__all__ = [
    "ToolNameCheck",
    "UnclassifiedTools",
    "check_max_threads",
    "check_namespace",
    "check_record",
    "check_store",
    "guard_config",
    "unclassified_tool_error",
    "with_config_signature",
]

_Init = TypeVar("_Init", bound=Callable[..., None])

_STORE_EXAMPLE = (
    "a LangGraph BaseStore (e.g. SqliteStore(...), PostgresStore(...), InMemoryStore())"
)


def _got(value: Any) -> str:
    """`<type> <repr>`, the repr shortened: what an error says it received."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(value).__name__} {text}"


def guard_config(
    config: Any,
    options: Mapping[str, object] | None = None,
    *,
    owner: str = "ReplayGuard",
    own: Sequence[str] = (),
) -> GuardConfig:
    """The configuration a constructor was given, validated.

    Args:
        config: A `GuardConfig`, a mapping of its fields, or None for the defaults.
        options: `GuardConfig` fields given as flat keywords (`max_repeats=2`), the way
            LangChain's middleware take their options (typed by `GuardOptions`).
        owner: The constructor's name, for the message on an unknown option.
        own: The constructor's own keywords (`store`...), which a misspelled one may mean.

    Returns:
        The configuration.

    Raises:
        TypeError: For an unknown option (naming the nearest one, as Python does for a
            misspelled keyword), for anything else than a config (a store passed in the
            config's place, a file path), or for both a config and flat options.
        pydantic.ValidationError: For unknown fields or invalid values (a `ValueError` that
            names the option and the allowed values).
    """
    if options:
        _check_option_names(options, owner, own)
        if config is not None:
            names = ", ".join(sorted(options))
            msg = (
                f"Pass either a config or GuardConfig fields as keywords, not both (got a "
                f"config and {names}). Put {names} into the GuardConfig, or drop the config."
            )
            raise TypeError(msg)
        return GuardConfig.model_validate(dict(options))
    if config is None:
        return GuardConfig()
    if isinstance(config, GuardConfig):
        return config
    if isinstance(config, Mapping):
        return GuardConfig.model_validate(dict(config))
    hint = ""
    if isinstance(config, str):
        hint = " To load a file, pass GuardConfig.from_file(path)."
    elif _is_store(config):
        hint = " Pass a store as store=..., not as the first argument."
    msg = f"config must be a GuardConfig or a dict of its fields, got {_got(config)}.{hint}"
    raise TypeError(msg)


def with_config_signature(init: _Init) -> _Init:
    """Give a constructor taking `**options: Unpack[GuardOptions]` GuardConfig's signature.

    Type checkers read the `GuardOptions` annotation; `help()`, `inspect.signature` and
    editors that introspect at run time see the same options as keyword-only parameters
    with `GuardConfig`'s defaults, generated from its fields (one source of truth).

    Args:
        init: The `__init__` whose `**options` stand for `GuardConfig`'s fields.

    Returns:
        `init`, with `__signature__` set.
    """
    signature = inspect.signature(init)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    hints = GuardOptions.__annotations__
    for name, field in GuardConfig.model_fields.items():
        default = field.get_default(call_default_factory=True)
        # The annotation as written (a string under `from __future__ import annotations`).
        annotation = getattr(hints.get(name), "__forward_arg__", hints.get(name, field.annotation))
        params.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
            )
        )
    setattr(init, "__signature__", signature.replace(parameters=params))  # noqa: B010
    return init


def _check_option_names(options: Mapping[str, object], owner: str, own: Sequence[str]) -> None:
    """Refuse a keyword that is no `GuardConfig` field, the way Python refuses one."""
    fields = [*GuardConfig.model_fields, "on_abort"]  # on_abort: deprecated, still taken
    for name in options:
        if name not in fields:
            hint = did_you_mean(name, [*fields, *own])
            if not hint:
                own_names = f" and {', '.join(own)}" if own else ""
                hint = (
                    f" Its options are GuardConfig's fields "
                    f"({', '.join(GuardConfig.model_fields)}){own_names}."
                )
            msg = f"{owner}() got an unexpected keyword argument {name!r}.{hint}"
            raise TypeError(msg)


def _is_store(value: Any) -> TypeGuard[BaseStore]:
    from langgraph.store.base import BaseStore

    return isinstance(value, BaseStore)


def check_store(store: Any, *, option: str = "store") -> BaseStore | None:
    """A store option: None or a LangGraph `BaseStore`.

    Args:
        store: The value given.
        option: The option's name, for the message.

    Returns:
        The store, or None.

    Raises:
        TypeError: For anything else, with what to pass instead.
    """
    if store is None or _is_store(store):
        return store
    hint = ""
    if isinstance(store, str):
        hint = (
            f" To keep the guard's data in the SQLite file {store!r}: "
            f"SqliteStore(sqlite3.connect({store!r}, check_same_thread=False)), then .setup()."
        )
    elif _is_checkpointer(store):
        hint = (
            " That is a checkpointer: give it to compile(checkpointer=...) or "
            "create_agent(checkpointer=...), and pass a store here."
        )
    elif hasattr(store, "__enter__"):
        hint = (
            " A context manager such as SqliteStore.from_conn_string(...) gives the store "
            "in a with statement: `with SqliteStore.from_conn_string(path) as store:`."
        )
    msg = f"{option} must be {_STORE_EXAMPLE}, got {_got(store)}.{hint}"
    raise TypeError(msg)


def _is_checkpointer(value: Any) -> bool:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    return isinstance(value, BaseCheckpointSaver)


def check_namespace(namespace: Any) -> tuple[str, ...]:
    """A namespace option: a non-empty tuple (or list) of strings.

    Args:
        namespace: The value given.

    Returns:
        The namespace as a tuple.

    Raises:
        TypeError: For a plain string, a non-sequence or a part that is not a string.
        ValueError: For an empty namespace.
    """
    example = "e.g. ('replay_guard', 'tenant-42')"
    if isinstance(namespace, str | bytes) or not isinstance(namespace, Sequence):
        msg = f"namespace must be a tuple of strings, {example}, got {_got(namespace)}."
        raise TypeError(msg)
    if not namespace:
        msg = f"namespace must have at least one part, {example}, got {namespace!r}."
        raise ValueError(msg)
    for index, part in enumerate(namespace):
        if not isinstance(part, str):
            msg = (
                f"namespace must be a tuple of strings, {example}, got {namespace!r} "
                f"(part {index} is {_got(part)})."
            )
            raise TypeError(msg)
    return tuple(namespace)


def check_record(record: Any) -> bool | BaseStore:
    """The `record` option: True, False or a `BaseStore` to write the records to.

    Args:
        record: The value given.

    Returns:
        The value.

    Raises:
        TypeError: For anything else (a string, a number).
    """
    if isinstance(record, bool) or _is_store(record):
        return record
    msg = (
        f"record must be True (record into the guard's store), False (the default) or "
        f"{_STORE_EXAMPLE} to record into, got {_got(record)}."
    )
    raise TypeError(msg)


def check_max_threads(max_threads: Any) -> int:
    """The callback handler's `max_threads`: a positive int.

    Args:
        max_threads: The value given.

    Returns:
        The value.

    Raises:
        TypeError: If it is not an int.
        ValueError: If it is below 1.
    """
    if isinstance(max_threads, bool) or not isinstance(max_threads, int):
        msg = (
            f"max_threads must be an int (the most threads kept in memory), "
            f"got {_got(max_threads)}."
        )
        raise TypeError(msg)
    if max_threads < 1:
        msg = f"max_threads={max_threads!r} must be at least 1 (the threads kept in memory)."
        raise ValueError(msg)
    return max_threads


class ToolNameCheck:
    """Checks the tool names a configuration gives policies against the guarded tools.

    A typo in `GuardConfig(tools={...})` leaves the real tool with the default policy
    (`pure`, so deduplicated). A policy name that matches no tool, while a tool without a
    policy of its own is a near match (`send_email` for `send_mail`), is an error that names
    that tool, raised each time until the name is fixed, when the check is `complete` (the
    guard knows every tool the graph can run) in enforce mode, unless
    `GuardConfig(strict_tool_names=False)`. Otherwise (a `ToolNode` the guard wraps may be
    one of several; another middleware may serve tools itself; shadow mode never stops a
    run) it is a `ReplayGuardWarning` naming both names, once. Any other name missing from
    the tools is a `ReplayGuardWarning`, once per name. The tool names seen by every check
    are remembered, so that a guard shared by several tool nodes does not warn about a tool
    that an earlier node has.

    Args:
        config: The guard's configuration.
    """

    def __init__(self, config: GuardConfig) -> None:
        """Create the check."""
        self.config = config
        self._known: set[str] = set()
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        # The middlewares sharing this check (`ReplayGuard.middleware`, one per agent): each
        # learns its agent's tools at its first model call, so while there are several, an
        # agent that has not run yet may have the name.
        self.middlewares = 0

    def check(
        self, tools: Iterable[str], *, where: str, warn: bool = True, complete: bool = False
    ) -> list[str]:
        """Check the configured names missing from `tools` (and from earlier checks).

        Args:
            tools: The names of the tools that are guarded here.
            where: What holds them, for the message (e.g. "ToolNode 'tools'").
            warn: Whether to warn; False raises only (a check before every tool is known,
                such as `create_agent` building the agent, whose middlewares may still
                serve tools of their own).
            complete: Whether `tools` (with the earlier checks) is every tool the graph can
                run. Only then is a near miss an error: a name missing from one of two
                `ToolNode`s, or served by a middleware, is a correct setup.

        Returns:
            The names warned about by this call.

        Raises:
            ValueError: A configured name matches no tool while a tool without a policy is
                a near match (`strict_tool_names`, the default), `complete` is True and
                the guard enforces.
        """
        names = sorted(set(tools))
        with self._lock:
            self._known.update(names)
            missing = [name for name in self.config.tools if name not in self._known]
            unpolicied = [t for t in sorted(self._known) if not self._has_policy(t)]
        typos = {name: self._near(name, unpolicied) for name in missing}
        strict = self.config.strict_tool_names and complete and self.config.mode == "enforce"
        if strict and any(typos.values()):
            lines = [
                self._typo(name, close, where, strict=True, complete=True)
                for name, close in typos.items()
                if close is not None
            ]
            msg = "\n".join(lines)
            raise ValueError(msg)
        if not warn:
            return []
        with self._lock:
            new = [name for name in missing if name not in self._warned]
            self._warned.update(new)
        for name in new:
            close = typos[name]
            text = (
                self._typo(name, close, where, strict=False, complete=complete)
                if close is not None
                else self._message(name, names, where)
            )
            warnings.warn(text, ReplayGuardWarning, stacklevel=4)
        return new

    def _has_policy(self, tool: str) -> bool:
        return self.config.policy_source(tool) in ("tools", "toolkit")

    @staticmethod
    def _near(name: str, tools: list[str]) -> str | None:
        close = difflib.get_close_matches(name, tools, n=1)
        return close[0] if close else None

    def _typo(self, name: str, close: str, where: str, *, strict: bool, complete: bool) -> str:
        default = self.config.default_policy.replay
        head = f"GuardConfig(tools=...) has a policy for {name!r}, but {where} has no such tool"
        text = (
            f"{head}; did you mean {close!r}? The policy applies to no call, and {close!r} "
            f"gets default_policy (replay={default!r}). Fix the name in tools={{...}}."
        )
        if not strict and complete:
            return text
        if not strict:
            return (
                f"{text} (If {name!r} is a tool that another tools node, an agent of this guard "
                "that has not run yet or a middleware runs, ignore this: the guard does not see "
                "every tool of the graph here.)"
            )
        return (
            f"{text} (The guard stops here, before any tool runs: it knows every tool of "
            f"{where}. To only be warned, pass GuardConfig(strict_tool_names=False).)"
        )

    def _message(self, name: str, tools: list[str], where: str) -> str:
        head = f"GuardConfig(tools=...) has a policy for {name!r}, but {where} has no such tool"
        shown = ", ".join(repr(t) for t in tools[:10]) + (", ..." if len(tools) > 10 else "")
        return (
            f"{head} (its tools: {shown or 'none'}). The policy applies to no call: fix the "
            "name in tools={...} or remove it (or ignore this if another tools node guarded "
            "by the same guard has that tool)."
        )


def _names(tools: Iterable[object]) -> dict[str, object]:
    """Tool names (a name, or a tool object's `name`) to the tool given, first one kept."""
    found: dict[str, object] = {}
    for each in tools:
        name = each if isinstance(each, str) else getattr(each, "name", None)
        if isinstance(name, str) and name:
            found.setdefault(name, each)
    return found


def _would_be(name: str, tool: object) -> str | None:
    """The class a tool's MCP annotations or a shipped toolkit would give it, said; or None."""
    hints = tool_hints(tool)
    replay = replay_class_from_hints(hints[1]) if hints is not None else None
    if replay is not None:
        return f"its MCP annotations give {replay!r}"
    for toolkit in known_toolkits():
        entry = load_toolkit(toolkit)["tools"].get(name)
        if isinstance(entry, Mapping):
            replay = entry.get("replay", "pure")
            return f"toolkits=({toolkit!r},) gives {replay!r}"
    return None


def _listed(tools: Mapping[str, object]) -> str:
    shown = []
    for name, tool in list(tools.items())[:20]:
        would = _would_be(name, tool)
        shown.append(f"{name!r} ({would})" if would else repr(name))
    return ", ".join(shown) + (f" and {len(tools) - 20} more" if len(tools) > 20 else "")


def unclassified_tool_error(names: Sequence[str], where: str) -> str:
    """The message of `GuardConfig(require_classes=True)` refusing unclassified tools.

    Args:
        names: The tools that nothing classified.
        where: What holds them, for the message.

    Returns:
        The message: the tools, and the fix.
    """
    example = ", ".join(f"{name!r}: 'unsafe'" for name in list(names)[:3])
    return (
        f"GuardConfig(require_classes=True) refuses to run tools that nothing classified, "
        f"and {where} has {len(names)}: {_listed(dict.fromkeys(names))}. Give each its replay "
        f"class in GuardConfig(tools={{{example}}}) ('pure' for a read, 'idempotent' for a "
        "write that is safe to repeat, 'unsafe' for a side effect), or name a toolkit "
        "(GuardConfig(toolkits=(...))); or pass require_classes=False to run them as "
        "default_policy."
    )


class UnclassifiedTools:
    """Lists, once per guard, the guarded tools that nothing classified.

    A tool without a `tools` entry, a toolkit or MCP annotations gets `default_policy`
    (`pure`: deduplicated, and run again after a crash without a ledger check): the runtime
    cannot infer side effects. Each guard (and callback handler) has its own list of the
    names it warned about, so that the warning is given once per tool and guard, never
    once per process (tests in any order see the same warnings).
    """

    def __init__(self) -> None:
        """Start with nothing warned."""
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def check(
        self,
        policies: GuardConfig | PolicyResolver,
        tools: Iterable[object],
        *,
        where: str,
        again: bool = False,
    ) -> list[str]:
        """Warn about the unclassified tools among `tools`; refuse them with `require_classes`.

        Args:
            policies: The guard's `PolicyResolver` (its configuration and the classes it
                learned from MCP annotations).
            tools: Tool names or tool objects (whose `metadata` may hold MCP annotations).
            where: What holds them, for the message (e.g. "ToolNode 'tools'").
            again: List every unclassified tool, warned before or not (`check(agent)`,
                which is asked for the list).

        Returns:
            The names warned about by this call.

        Raises:
            ValueError: `GuardConfig(require_classes=True)` and a tool is unclassified.
        """
        resolver = resolver_of(policies)
        config = resolver.config
        found = _names(tools)
        unclassified = [n for n in sorted(found) if resolver.policy_source(n) == "default"]
        if not unclassified:
            return []
        if config.require_classes:
            msg = unclassified_tool_error(unclassified, where)
            raise ValueError(msg)
        if "default_policy" in config.model_fields_set:
            return []  # the configuration chose a class for every tool it does not name
        with self._lock:
            new = [n for n in unclassified if again or n not in self._warned]
            self._warned.update(new)
        if not new:
            return []
        default = config.default_policy.replay
        text = (
            f"langgraph-replay-guard: {len(new)} tool(s) of {where} have no replay class and "
            f"run as default_policy (replay={default!r}: deduplicated as a read, and run "
            f"again after a crash): {_listed({n: found[n] for n in new})}. The guard "
            "cannot infer side effects: give each its class in GuardConfig(tools={...}) "
            "('pure', 'idempotent' or 'unsafe') or name a toolkit; "
            "GuardConfig(require_classes=True) then refuses any tool left unclassified."
        )
        warnings.warn(text, UnclassifiedToolsWarning, stacklevel=4)
        return new
