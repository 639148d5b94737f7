"""Ledger rules for waits and what triggers them: WaitFor, operator messages, callbacks, task
results, timers and rechecks. A trigger counts; it never resolves a wait or clears a blocker."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from services.ledger.rules.acceptance import refuse_while_verifying
from services.ledger.rules.common import (
    cancel_waits,
    fresh_input,
    recheck_deadline,
    recheck_timer,
    release_focus,
    revise,
    view,
    wait_json,
)
from services.ledger.rules.deadlines import deadline_scheduled
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.capability import token_id_of
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import InboxMessage, MessageOrigin, WaitingIntent, WakeKind
from shared.domain.stored import CapabilityRecord, Evidence
from shared.wire.commands import (
    AppendOperatorMessage,
    ConsumeRecheck,
    FireTimer,
    RecordCallback,
    RecordTaskResult,
    WaitFor,
)
from shared.wire.events import (
    CallbackDeliveredToInbox,
    Event,
    OperatorMessageReceived,
    RecheckConsumed,
    TimerScheduled,
    WaitCreated,
    WaitTriggered,
    WorkItemUpdated,
)


def trigger(
    state: LedgerState, wait: WaitingIntent, ctx: Context, source: str, **provenance: Any
) -> tuple[LedgerState, list[Event]]:
    """Count one trigger on the wait; nothing else about the wait or its item changes."""
    triggered = wait.model_copy(
        update={"trigger_count": wait.trigger_count + 1, "last_triggered_at": ctx.now}
    )
    state = state.with_wait(triggered)
    event = WaitTriggered(
        agent_id=state.agent_id,
        work_item_id=wait.work_item_id,
        wait_id=wait.id,
        trigger_count=triggered.trigger_count,
        source=source,
        **provenance,
    )
    state, reset = fresh_input(state, f"{source}_trigger")
    return state, [event, *reset]


def _owner(state: LedgerState, cmd: WaitFor) -> str | None:
    if cmd.args.work_item_id is not None:
        item = state.open_item(cmd.args.work_item_id)
        refuse_while_verifying(item, "WaitFor")
        return item.id
    return state.current_id


def _new_wait(state: LedgerState, cmd: WaitFor, owner: str | None, ctx: Context) -> WaitingIntent:
    args = cmd.args
    wake_at = None
    if args.wake is WakeKind.TIMER and args.wake_after_ms is not None:
        wake_at = ctx.now + timedelta(milliseconds=args.wake_after_ms)
    deadline_at = None if args.deadline_s is None else ctx.now + timedelta(seconds=args.deadline_s)
    return WaitingIntent(
        id=ctx.new_id("wait_"),
        agent_id=state.agent_id,
        work_item_id=owner,
        wake=args.wake,
        reason=args.reason,
        resource=args.resource,
        wake_at=wake_at,
        deadline_at=deadline_at,
        created_at=ctx.now,
    )


def wait_for(state: LedgerState, cmd: WaitFor, ctx: Context) -> Decision:
    state.require_agent()
    owner = _owner(state, cmd)
    state, events = cancel_waits(state, owner, ctx.now, "replaced")
    wait = _new_wait(state, cmd, owner, ctx)
    state = state.with_wait(wait)
    events.append(WaitCreated(agent_id=state.agent_id, work_item_id=owner, wait=wait))
    if wait.wake_at is not None:
        events.append(
            TimerScheduled(
                agent_id=state.agent_id, work_item_id=owner, due_at=wait.wake_at, wait_id=wait.id
            )
        )
    if wait.deadline_at is not None:
        events.append(deadline_scheduled(state, "wait", wait.id, wait.deadline_at, owner))
    side = SideWrites()
    if cmd.capability_token_hash is not None and wait.wake is WakeKind.EXTERNAL:
        cap = CapabilityRecord(
            token_id=token_id_of(cmd.capability_token_hash),
            agent_id=state.agent_id,
            wait_id=wait.id,
        )
        side = SideWrites(capabilities=((cmd.capability_token_hash, cap),))
    result: dict[str, Any] = {"wait": wait_json(wait)}
    if owner is not None:
        # The wait itself is what wakes the agent: a recheck only when asked for, and (for a
        # timer) never before the timer is due.
        ms = cmd.args.recheck_after_ms
        changes = {
            "blocked_by": cmd.args.reason,
            "recheck_at": None if ms is None else recheck_deadline(state, owner, ctx.now, ms),
            "recheck_consumed_at": None,
        }
        item = revise(state.items[owner], ctx.now, **changes)
        state = state.with_item(item)
        events.append(
            WorkItemUpdated(
                agent_id=state.agent_id, work_item_id=owner, work_item=item, changed=tuple(changes)
            )
        )
        events += recheck_timer(state, item)
        state, released = release_focus(state, owner, "waiting")
        events += released
        result["work_item"] = view(state, item)
    return Decision(state=state, events=tuple(events), result=result, side=side)


def _operator_wait(state: LedgerState, work_item_id: str | None) -> WaitingIntent | None:
    waits = [w for w in state.active_waits() if w.wake is WakeKind.OPERATOR_INPUT]
    if work_item_id is not None:
        waits = [w for w in waits if w.work_item_id == work_item_id]
    return waits[0] if len(waits) == 1 else None


def append_operator_message(
    state: LedgerState, cmd: AppendOperatorMessage, ctx: Context
) -> Decision:
    state.require_agent()
    if cmd.work_item_id is not None:
        state.item(cmd.work_item_id)
    message = InboxMessage(
        id=cmd.message_id,
        agent_id=state.agent_id,
        origin=MessageOrigin.OPERATOR,
        text=cmd.text,
        work_item_id=cmd.work_item_id,
        created_at=ctx.now,
    )
    wait = _operator_wait(state, cmd.work_item_id)
    events: list[Event] = [
        OperatorMessageReceived(
            agent_id=state.agent_id,
            work_item_id=cmd.work_item_id,
            message_id=cmd.message_id,
            text=cmd.text,
            triggered_wait_id=wait.id if wait else None,
        )
    ]
    if wait is not None:
        state, triggered = trigger(state, wait, ctx, "operator_message")
        events += triggered
    else:
        state, reset = fresh_input(state, "operator_message")
        events += reset
    result = {"message_id": cmd.message_id, "triggered_wait_id": wait.id if wait else None}
    return Decision(state, tuple(events), result, side=SideWrites(inbox_push=(message,)))


def _capability(state: LedgerState, cmd: RecordCallback) -> CapabilityRecord:
    cap = state.capability
    if cap is None or cap.agent_id != state.agent_id:
        raise DomainError(ErrorKind.ACCESS_DENIED, "unknown capability token")
    return cap


def _callback_target(state: LedgerState, cap: CapabilityRecord) -> WaitingIntent | None:
    """The wait a callback triggers, None for inbox delivery; a revoked wait is refused."""
    if cap.wait_id is not None:
        wait = state.waits.get(cap.wait_id)
        if wait is None or not wait.is_active:
            raise DomainError(
                ErrorKind.ACCESS_DENIED,
                "this capability's wait was cancelled; the token no longer triggers anything",
                recovery_hint="Ask the agent for its current callback URL.",
            )
        return wait
    external = [w for w in state.active_waits() if w.wake is WakeKind.EXTERNAL]
    return external[0] if len(external) == 1 else None


def _evidence(
    state: LedgerState,
    ctx: Context,
    wait: WaitingIntent | None,
    origin: str,
    body: str,
    **prov: Any,
) -> Evidence:
    return Evidence(
        id=ctx.new_id("ev_"),
        agent_id=state.agent_id,
        wait_id=wait.id if wait else None,
        work_item_id=wait.work_item_id if wait else None,
        origin=origin,
        body=body[:65_536],
        created_at=ctx.now,
        **prov,
    )


def record_callback(state: LedgerState, cmd: RecordCallback, ctx: Context) -> Decision:
    state.require_agent()
    cap = _capability(state, cmd)
    if state.delivery_seen:
        result = {"delivery_id": cmd.delivery_id, "disposition": "duplicate"}
        return Decision(state=state, result=result)
    wait = _callback_target(state, cap)
    prov = {
        "token_id": cap.token_id,
        "delivery_id": cmd.delivery_id,
        "content_type": cmd.content_type,
    }
    evidence = _evidence(
        state, ctx, wait, "callback", cmd.body, body_encoding=cmd.body_encoding, **prov
    )
    mark = (cmd.token_hash, cmd.delivery_id)
    if wait is None:
        return _callback_to_inbox(state, cmd, ctx, evidence, mark)
    state, events = trigger(state, wait, ctx, "callback", **prov)
    result = {"delivery_id": cmd.delivery_id, "disposition": "triggered", "wait_id": wait.id}
    side = SideWrites(evidence=(evidence,), delivery_mark=mark)
    return Decision(state, tuple(events), result, side=side)


def _callback_to_inbox(
    state: LedgerState, cmd: RecordCallback, ctx: Context, evidence: Evidence, mark: tuple[str, str]
) -> Decision:
    """Agent-scope callback with no single external wait: external evidence in the inbox."""
    message = InboxMessage(
        id=evidence.id,
        agent_id=state.agent_id,
        origin=MessageOrigin.CALLBACK,
        text=cmd.body[:65_536],
        content_type=cmd.content_type,
        body_encoding=evidence.body_encoding,
        token_id=evidence.token_id,
        delivery_id=cmd.delivery_id,
        created_at=ctx.now,
    )
    event = CallbackDeliveredToInbox(
        agent_id=state.agent_id,
        message_id=message.id,
        delivery_id=cmd.delivery_id,
        source=cmd.source,
    )
    state, reset = fresh_input(state, "callback")
    result = {"delivery_id": cmd.delivery_id, "disposition": "delivered_to_inbox"}
    side = SideWrites(inbox_push=(message,), evidence=(evidence,), delivery_mark=mark)
    return Decision(state, (event, *reset), result, side=side)


def record_task_result(state: LedgerState, cmd: RecordTaskResult, ctx: Context) -> Decision:
    state.require_agent()
    waits = [
        w
        for w in state.active_waits()
        if w.wake is WakeKind.TASK_RESULT and w.resource == cmd.task_id
    ]
    if not waits:
        raise DomainError(
            ErrorKind.WAIT_NOT_FOUND, f"no active task_result wait for {cmd.task_id!r}"
        )
    wait = waits[0]
    body = f"task {cmd.task_id} {cmd.status.value}: {cmd.summary}"
    evidence = _evidence(state, ctx, wait, "task_result", body)
    state, events = trigger(state, wait, ctx, "task_result")
    result = {"wait_id": wait.id, "disposition": "triggered"}
    return Decision(state, tuple(events), result, side=SideWrites(evidence=(evidence,)))


def fire_timer(state: LedgerState, cmd: FireTimer, ctx: Context) -> Decision:
    """A due timer triggers its wait; a timer whose wait was replaced or cancelled is a no-op."""
    state.require_agent()
    wait = state.waits.get(cmd.wait_id)
    if wait is None or not wait.is_active or wait.wake is not WakeKind.TIMER:
        return Decision(state=state, result={"wait_id": cmd.wait_id, "fired": False})
    state, events = trigger(state, wait, ctx, "timer")
    return Decision(state, tuple(events), {"wait_id": wait.id, "fired": True})


def consume_recheck(state: LedgerState, cmd: ConsumeRecheck, ctx: Context) -> Decision:
    """Mark due rechecks delivered (coalesced per agent); items not due are left alone."""
    state.require_agent()
    consumed = []
    for work_item_id in cmd.work_item_ids:
        item = state.items.get(work_item_id)
        if item is None or not item.is_open or item.recheck_at is None:
            continue
        if item.recheck_at > ctx.now or (
            item.recheck_consumed_at is not None and item.recheck_consumed_at >= item.recheck_at
        ):
            continue
        state = state.with_item(revise(item, ctx.now, recheck_consumed_at=ctx.now))
        consumed.append(item.id)
    if not consumed:
        return Decision(state=state, result={"consumed": []})
    event = RecheckConsumed(agent_id=state.agent_id, work_item_ids=tuple(consumed))
    return Decision(state, (event,), {"consumed": consumed})
