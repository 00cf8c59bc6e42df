"""Tenants sharing one store never see each other's guard state, ledger rows or records."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.base import BaseStore

from langgraph_replay_guard import GuardConfig, ReplayGuard
from langgraph_replay_guard.records import RecordStore
from langgraph_replay_guard.testing import ScriptedChatModel
from tests.integration.graphs import SYSTEM, ToolRuns, build_agent, build_custom_graph

# InMemorySaver is on purpose here: the warning about it is tested elsewhere.
pytestmark = pytest.mark.filterwarnings(
    "ignore:langgraph-replay-guard.*durable checkpointer:langgraph_replay_guard.ReplayGuardWarning"
)

THREAD = "shared-thread"
TENANTS = ("tenantA", "tenantB")
# The same lookup twice: a tenant's own repeat is its guard's business, the other's is not.
SCRIPT = [
    [{"name": "lookup_customer", "args": {"customer": "C1"}, "id": "call-1"}],
    [{"name": "lookup_customer", "args": {"customer": "C1"}, "id": "call-2"}],
    "Done.",
]


class SameIdsModel(ScriptedChatModel):
    """The scripted model, with the same message ids on every run (`ai-0`, `ai-1`, ...).

    Two tenants whose runs differ in nothing but the guard's namespace: the thread id, the
    user message id, the AIMessage ids and the tool call ids are all equal, so any guard
    state keyed without the namespace (turn state, ledger identity, records) collides.
    """

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        result = super()._generate(messages, *args, **kwargs)
        generation = result.generations[0]
        generation.message = generation.message.model_copy(update={"id": f"ai-{self.calls - 1}"})
        return result


def tenant_tools(tenant: str, runs: ToolRuns) -> list[BaseTool]:
    @tool
    def lookup_customer(customer: str) -> str:
        """Look up a customer record."""
        runs.hit(tenant)
        return f"SECRET-{tenant}"

    return [lookup_customer]


def run_custom_graph(guard: ReplayGuard, model: Any, tools: list[BaseTool]) -> tuple[Any, dict]:
    return build_custom_graph(guard, model, tools, checkpointer=InMemorySaver()), {}


def run_middleware(guard: ReplayGuard, model: Any, tools: list[BaseTool]) -> tuple[Any, dict]:
    return build_agent(guard, model, tools, checkpointer=InMemorySaver()), {}


def run_callback_handler(guard: ReplayGuard, model: Any, tools: list[BaseTool]) -> tuple[Any, dict]:
    agent = create_agent(model, tools, system_prompt=SYSTEM, checkpointer=InMemorySaver())
    return agent, {"callbacks": [guard.callback_handler()]}


INTEGRATIONS: dict[str, Callable[..., tuple[Any, dict]]] = {
    "wrap_tool_node": run_custom_graph,
    "middleware": run_middleware,
    "callback_handler": run_callback_handler,
}


def store_items(store: BaseStore) -> list[tuple[tuple[str, ...], str]]:
    """Every item in the store: its namespace and its value as JSON text."""
    items = []
    for namespace in store.list_namespaces(limit=10_000):
        for item in store.search(namespace, limit=10_000):
            if tuple(item.namespace) == tuple(namespace):
                items.append((tuple(namespace), json.dumps(item.value, default=str)))
    return items


@pytest.mark.parametrize("replay", ["pure", "unsafe"])
@pytest.mark.parametrize("integration", list(INTEGRATIONS))
def test_tenants_on_one_store_never_see_each_others_results(
    integration: str, replay: str, any_store: BaseStore
) -> None:
    config = GuardConfig(tools={"lookup_customer": replay})
    runs = ToolRuns()
    outputs: dict[str, Any] = {}
    execution_ids: dict[str, str | None] = {}
    for tenant in TENANTS:
        namespace = ("replay_guard", tenant)
        guard = ReplayGuard(config, store=any_store, namespace=namespace, record=True)
        model = SameIdsModel(script=SCRIPT)
        graph, extra = INTEGRATIONS[integration](guard, model, tenant_tools(tenant, runs))
        recorded = guard.record(graph)
        run_config = {"configurable": {"thread_id": THREAD}, **extra}
        user = HumanMessage("Who is customer C1?", id="human-1")
        outputs[tenant] = recorded.invoke({"messages": [user]}, run_config, durability="sync")
        execution_ids[tenant] = recorded.last_execution_id

    # Tenant B ran its own tool, exactly as tenant A did, and saw its own result only.
    assert runs["tenantA"] >= 1
    assert runs["tenantB"] == runs["tenantA"], "tenant B was answered from tenant A's state"
    answers = {
        tenant: [m.text for m in outputs[tenant]["messages"] if isinstance(m, ToolMessage)]
        for tenant in TENANTS
    }
    assert answers["tenantB"][0] == "SECRET-tenantB"
    assert answers["tenantB"] == [a.replace("tenantA", "tenantB") for a in answers["tenantA"]]
    assert "SECRET-tenantA" not in str(outputs["tenantB"])

    # Each tenant's execution record lives under its own namespace, holding its own run.
    for tenant in TENANTS:
        other = "tenantB" if tenant == "tenantA" else "tenantA"
        records = RecordStore(any_store, namespace=("replay_guard", tenant, "records"))
        infos = records.list_records()
        assert [info.execution_id for info in infos] == [execution_ids[tenant]]
        record = records.get(infos[0].execution_id)
        assert record is not None
        text = json.dumps(record.to_json_data(), default=str)
        assert f"SECRET-{tenant}" in text
        assert f"SECRET-{other}" not in text
    assert RecordStore(any_store).list_records() == []  # nothing under the default namespace

    # Every piece of guard state that holds a tenant's result is under that tenant's prefix.
    items = store_items(any_store)
    assert items, "the guard kept state in the store"
    for namespace, text in items:
        for tenant in TENANTS:
            if f"SECRET-{tenant}" in text:
                assert namespace[:2] == ("replay_guard", tenant), (namespace, text[:200])


def test_a_handlers_state_sits_under_its_namespace_and_inspect_finds_it(tmp_path):
    import io
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.store.sqlite import SqliteStore

    from langgraph_replay_guard import ReplayGuardCallbackHandler
    from langgraph_replay_guard.cli import inspect_cmd
    from langgraph_replay_guard.cli.main import build_parser

    db = tmp_path / "agents.sqlite"

    def connect():
        return sqlite3.connect(db, check_same_thread=False, isolation_level=None)

    store, saver = SqliteStore(connect()), SqliteSaver(connect())
    store.setup()
    saver.setup()
    lookup = [("lookup_customer", {"customer": "C1"})]
    handlers = {
        "tenant.A": ReplayGuardCallbackHandler(store=store, namespace=("replay_guard", "tenant.A")),
        "default": ReplayGuardCallbackHandler(store=store),
    }
    for name, handler in handlers.items():
        calls = 2 if name == "tenant.A" else 1  # tell the two states apart
        model = ScriptedChatModel(script=[lookup] * calls + ["Done."])
        agent = create_agent(model, tenant_tools(name, ToolRuns()))
        config = {"configurable": {"thread_id": THREAD}, "callbacks": [handler]}
        agent.invoke({"messages": [HumanMessage("Who is C1?")]}, config)

    # The namespace is a prefix, as for the ledger and the records (its dot escaped like
    # theirs); the default handler keeps its state where it always did.
    assert store.get(("replay_guard", "tenant%2EA", "callbacks"), THREAD) is not None
    assert store.get(("replay_guard", "callbacks"), THREAD) is not None
    assert handlers["tenant.A"].inspect(THREAD).totals.calls == 2

    def inspect(namespace: str) -> dict:
        out = io.StringIO()
        argv = ["inspect", "--db", str(db), "--thread", THREAD, "--namespace", namespace, "--json"]
        args = build_parser().parse_args(argv)
        assert inspect_cmd.run(args, out=out, err=io.StringIO()) == 0
        return json.loads(out.getvalue())["guard"]["callback handler"]

    assert inspect("replay_guard/tenant.A")["totals"]["calls"] == 2
    assert inspect("replay_guard")["totals"]["calls"] == 1
