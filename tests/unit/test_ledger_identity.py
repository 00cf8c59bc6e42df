"""A call's ledger identity: unchanged keys for a default guard, scopes, argument variants."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import time
from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from langgraph_replay_guard.errors import ReplayConflictError
from langgraph_replay_guard.replay import owners
from langgraph_replay_guard.replay.ledger import (
    CallContext,
    CallIdentity,
    Write,
    admit,
    args_digest,
    call_anchor,
    call_scope,
    finished_entry,
    index_namespace,
    nested_key,
    repeat_lookup_key,
    row_namespace,
    started_entry,
)
from langgraph_replay_guard.storage.ledger_io import run_plan

PREFIX = ("replay_guard",)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def context(
    args: dict[str, Any], *, replay: str = "unsafe", asked: dict[str, Any] | None = None
) -> CallContext:
    asked_hash = args_digest(asked) if asked is not None else None
    return CallContext(
        identity=CallIdentity("t", "tools", "ai-1", "call-1"),
        tool="send",
        replay=replay,
        args=args,
        args_hash=args_digest(args),
        rows_ns=row_namespace(PREFIX, "t"),
        index_ns=index_namespace(PREFIX, "t"),
        wait=1.0,
        is_answered=lambda _tc, _ai: True,
        is_alive=lambda owner: owners.is_alive(owner, _now()),
        new_owner=lambda: owners.REGISTRY.new_owner(900.0, _now()),
        now=_now,
        elapsed=time.monotonic,
        asked_hash=lambda: asked_hash,
    )


def finish(store: InMemoryStore, ctx: CallContext, content: str) -> None:
    admission = run_plan(store, admit(ctx))
    assert admission.kind == "run"
    assert admission.entry is not None
    done = finished_entry(admission.entry, content, None, "success")
    run_plan(store, _write(ctx, done.key, done.to_value()))


def _write(ctx: CallContext, key: str, value: dict[str, Any]) -> Any:
    yield Write(((ctx.rows_ns, key, value),))


def test_a_default_guard_at_the_top_of_the_graph_keeps_its_keys():
    ident = CallIdentity("t", "tools", "ai-1", "call-1")
    assert ident.key == "tools/ai-1/call-1"
    raw = "\x1f".join(("t", "tools", "ai-1", "call-1"))
    assert ident.idempotency_key == "rg-" + hashlib.sha256(raw.encode()).hexdigest()[:32]
    ctx = context({"to": "ann"})
    assert ctx.call_index_key == f"call/send/{ctx.args_hash}"


def test_a_scope_changes_the_key_the_idempotency_key_and_the_lookup_row():
    plain = CallIdentity("t", "tools|tools", "ai-1", "call-1")
    anchor = call_anchor("t", "", "tools", "ai-0", "call-0")
    scoped = dataclasses.replace(plain, scope=call_scope("helper", anchor))
    assert scoped.key == f"[~helper@{anchor}]tools|tools/ai-1/call-1"
    assert scoped.idempotency_key != plain.idempotency_key
    ctx = context({"to": "ann"})
    nested = dataclasses.replace(ctx, identity=scoped)
    sub = dataclasses.replace(ctx, identity=plain)
    assert len({ctx.call_index_key, sub.call_index_key, nested.call_index_key}) == 3
    assert call_scope("", "") == ""
    assert call_scope("", anchor) == f"@{anchor}"


def test_a_middlewares_retry_with_other_arguments_is_a_variant_of_its_own():
    store = InMemoryStore()
    first = context({"to": "ann"}, asked={"to": "ann"})
    finish(store, first, "unknown recipient")
    retry = context({"to": "ann@example.com"}, asked={"to": "ann"})
    admission = run_plan(store, admit(retry))
    assert admission.kind == "run"
    assert admission.context is not None
    variant = admission.context.identity
    assert variant.key == f"{first.identity.key}#{retry.args_hash[7:19]}"
    assert admission.key is None  # unsafe: no idempotency key
    assert variant.idempotency_key != first.identity.idempotency_key


def test_an_edited_message_is_still_a_conflict():
    store = InMemoryStore()
    finish(store, context({"to": "ann"}, asked={"to": "ann"}), "sent")
    edited = context({"to": "mallory"}, asked={"to": "mallory"})  # the message itself changed
    with pytest.raises(ReplayConflictError, match="other arguments"):
        run_plan(store, admit(edited))
    unknown_message = context({"to": "mallory"})  # the message cannot be found
    with pytest.raises(ReplayConflictError):
        run_plan(store, admit(unknown_message))


def test_a_variant_waits_for_nothing_while_the_first_outcome_is_unknown():
    store = InMemoryStore()
    first = context({"to": "ann"}, asked={"to": "ann"})
    admission = run_plan(store, admit(first))
    assert admission.entry is not None
    gone = dataclasses.replace(admission.entry, owner=None)  # its worker died
    run_plan(store, _write(first, gone.key, gone.to_value()))
    retry = context({"to": "ann@example.com"}, asked={"to": "ann"})
    assert run_plan(store, admit(retry)).kind == "unknown"


@pytest.mark.parametrize("replay", ["unsafe", "idempotent"])
def test_other_arguments_in_a_new_run_of_the_task_are_no_variant(replay: str) -> None:
    """A middleware outside the guard that stamps every run anew is no corrected retry."""
    store = InMemoryStore()
    finish(store, context({"to": "ann", "stamp": "1"}, replay=replay, asked={"to": "ann"}), "sent")
    rerun = dataclasses.replace(
        context({"to": "ann", "stamp": "2"}, replay=replay, asked={"to": "ann"}),
        tried_here=lambda key: False,  # no attempt of the row ran in this run of the task
    )
    admission = run_plan(store, admit(rerun))
    assert admission.kind == "unknown"
    assert "no attempt of it ran in this run" in admission.why


def _nested(
    enclosing: tuple[str, str], *, replay: str = "unsafe", answered: bool = False
) -> CallContext:
    """A send made inside the enclosing call `(tool_call_id, AIMessage id)`."""
    ctx = context({"to": "ann"}, replay=replay)
    anchor = call_anchor("t", "", "tools", enclosing[1], enclosing[0])
    stable = nested_key("", "", "tools", "ask_worker", args_digest({"task": "Email ann."}))
    return dataclasses.replace(
        ctx,
        identity=CallIdentity(
            "t", "tools|tools", f"ai-of-{enclosing[0]}", "call-1", call_scope("w", anchor)
        ),
        repeat_index_key=repeat_lookup_key("w", stable, "tools|tools", "send", ctx.args_hash),
        enclosing_call=enclosing,
        enclosing_answered=lambda _tc, _ai: answered,
    )


@pytest.mark.parametrize("replay", ["unsafe", "idempotent"])
def test_a_nested_call_inside_an_enclosing_call_asked_again_is_found(replay: str) -> None:
    """A fork re-asks the enclosing call with new ids: its body's calls get new identities."""
    store = InMemoryStore()
    first = _nested(("ask-1", "ai-1"), replay=replay)
    admission = run_plan(store, admit(first))
    assert admission.entry is not None
    done = finished_entry(admission.entry, "sent", None, "success")
    run_plan(store, _write(first, done.key, done.to_value()))

    forked = run_plan(store, admit(_nested(("ask-2", "ai-2"), replay=replay)))
    if replay == "unsafe":
        assert forked.kind == "unknown"
        assert "inside an identical earlier call" in forked.why
    else:  # idempotent: run again with the earlier call's key
        assert forked.kind == "run"
        assert forked.key == admission.key
    sibling = _nested(("ask-4", "ai-1"), replay=replay)  # the first one's AIMessage
    assert run_plan(store, admit(sibling)).kind == "run"
    repeat = _nested(("ask-3", "ai-3"), replay=replay, answered=True)  # a deliberate repeat
    assert run_plan(store, admit(repeat)).kind == "run"


def test_a_pure_call_never_conflicts():
    store = InMemoryStore()
    ctx = context({"q": "a"}, replay="pure", asked={"q": "a"})
    other = dataclasses.replace(ctx, args={"q": "b"}, args_hash=args_digest({"q": "b"}))
    done = finished_entry(started_entry(other, args=None, idempotency_key=None), "b", None, "")
    run_plan(store, _write(ctx, done.key, done.to_value()))
    admission = run_plan(store, admit(ctx))  # even the model's own arguments: a read
    assert admission.kind == "run"
    assert admission.context is not None
    assert admission.context.identity.variant
