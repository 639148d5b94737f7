"""Ledger rules for agents that spawn agents (docs/contract.md, SpawnAgent).

The spawning agent and its child may live in different partitions, so each side decides only
about its own agent, as a delegation's do (rules/delegations.py):

- SpawnAgent, on the parent: refused when the id is taken (`agent_exists`), past the depth
  limit or the children limit; else it records the spawn (a private child's delegation, with
  `child_work_item_id: null`) and leaves `CreateSpawnedAgent` in the outbox.
- CreateSpawnedAgent, on the child: creates the agent with its spec and first inbox message.
  Never a WorkItem: the child creates its own.
- Binding, on the child: the first WorkItem a private child creates while its spawn message is
  in its turn carries `delegated_from` (so its end reports back as a delegated item's does,
  rules/delegation_effects.py) and `<dlg>:bind` tells the parent (RecordDelegationBound).
"""

from __future__ import annotations

from dataclasses import replace

from services.ledger.rules.agents import spec_digest
from services.ledger.rules.common import fresh_input, view, with_running
from services.ledger.rules.posture import hold_token_budget
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.capability import token_id_of
from shared.domain.delegation import (
    ChainRefusal,
    DelegationRecord,
    DelegationStatus,
    DelegationStep,
    SpawnedBy,
    chain_refusal,
    new_chain,
    spawn_label,
    step_command_id,
)
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import (
    AgentLoop,
    AgentState,
    InboxMessage,
    MessageOrigin,
    WakeBudget,
    WorkItem,
)
from shared.domain.specs import effective_wake_budget
from shared.domain.stored import AgentRecord, CapabilityRecord
from shared.domain.tools import SpawnKind
from shared.wire import commands as c
from shared.wire.events import (
    AgentCreated,
    AgentSpawned,
    DelegationBound,
    DelegationReceived,
    Event,
)

CHILDREN_MEMORY = 1000
"""Children an agent's record names (the newest): SendMessage's peers among them."""


def public_spawn_command_id(parent: str) -> str:
    """A public named agent's creation: one id per (child, parent), so only the first spawner
    of an id creates it and a re-send is a duplicate."""
    return f"spawn:{parent}"


# ---------------------------------------------------------------- the spawning side


def _chain(state: LedgerState) -> tuple[str, ...]:
    """The delegation chain a child spawned now serves: the current item's chain and this
    agent (just this agent outside any WorkItem)."""
    current = state.current_id
    item = state.items.get(current) if current is not None else None
    return new_chain(item.delegated_from if item is not None else None, state.agent_id)


def _refuse(state: LedgerState, cmd: c.SpawnAgent, ctx: Context, chain: tuple[str, ...]) -> None:
    agent = state.require_agent()
    child = cmd.child_agent_id
    if child in state.agents_found or child == state.agent_id:
        raise DomainError(
            ErrorKind.AGENT_EXISTS,
            f"agent {child!r} exists",
            details={"agent_id": child},
        )
    if cmd.args.kind is not SpawnKind.PRIVATE_CHILD:
        return
    refusal = chain_refusal(chain, child, ctx.max_delegation_depth)
    if refusal is ChainRefusal.TOO_DEEP:
        raise DomainError(
            ErrorKind.DELEGATION_TOO_DEEP,
            f"a child spawned here would be {len(chain)} hops from the root WorkItem; "
            f"the limit is {ctx.max_delegation_depth}",
            details={"depth": len(chain), "limit": ctx.max_delegation_depth},
        )
    alive = sorted(d.child_agent_id for d in agent.delegations_out.values() if d.spawned)
    if len(alive) >= ctx.max_children:
        raise DomainError(
            ErrorKind.TOO_MANY_CHILDREN,
            f"{len(alive)} private children are still running; the limit is {ctx.max_children}",
            details={"children": alive, "limit": ctx.max_children},
        )


def spawn_agent(state: LedgerState, cmd: c.SpawnAgent, ctx: Context) -> Decision:
    """Record the spawn; the child is created by the `CreateSpawnedAgent` this leaves in the
    outbox. The parent is not blocked: it may WaitFor the delegation's task_result."""
    chain = _chain(state)
    _refuse(state, cmd, ctx, chain)
    args = cmd.args
    agent = state.require_agent()
    current = state.current_id
    child = cmd.child_agent_id
    record: DelegationRecord | None = None
    spawned_by: SpawnedBy | None = None
    if args.kind is SpawnKind.PRIVATE_CHILD:
        if cmd.delegation_id is None or args.initial_message is None:
            raise DomainError(
                ErrorKind.INVALID_TOOL_INPUT, "a private child needs a message and a delegation id"
            )
        label = spawn_label(args.initial_message)
        record = DelegationRecord(
            id=cmd.delegation_id,
            parent_agent_id=state.agent_id,
            parent_work_item_id=current,
            child_agent_id=child,
            child_work_item_id=None,
            objective=label,
            reason=f"spawned {child}",
            depth=len(chain),
            spawned=True,
            keep=args.keep,
            created_at=ctx.now,
        )
        spawned_by = SpawnedBy(
            delegation_id=record.id,
            parent_agent_id=state.agent_id,
            parent_work_item_id=current,
            chain=chain,
            label=label,
        )
        agent = with_running(agent, record)
    command_id = (
        step_command_id(record.id, DelegationStep.CREATE)
        if record is not None
        else public_spawn_command_id(state.agent_id)
    )
    create = c.CreateSpawnedAgent(
        command_id=command_id,
        agent_id=child,
        parent_agent_id=state.agent_id,
        spec=cmd.child_spec,
        agent_token_hash=cmd.agent_token_hash,
        callback_token_hash=cmd.callback_token_hash,
        message=args.initial_message,
        spawned_by=spawned_by,
    )
    children = (*agent.children, child)[-CHILDREN_MEMORY:]
    state = state.with_agent(agent.model_copy(update={"children": children}))
    event = AgentSpawned(
        agent_id=state.agent_id,
        work_item_id=current,
        child_agent_id=child,
        kind=args.kind.value,
        workspace_mode=args.workspace_mode.value,
        delegation=record,
    )
    side = SideWrites(delegations=(record,) if record else (), outbox=(create,))
    result: dict[str, object] = {"agent_id": child, "loop": AgentLoop.BUILTIN.value}
    if record is not None:
        result["delegation"] = record.model_dump(mode="json")
    return Decision(state, (event,), result, side=side)


def record_delegation_bound(
    state: LedgerState, cmd: c.RecordDelegationBound, ctx: Context
) -> Decision:
    """The child bound its first WorkItem: the parent's record names it. A record that already
    names one, or ended, changes nothing."""
    agent = state.require_agent()
    record = agent.delegations_out.get(cmd.delegation_id)
    if record is None or record.child_work_item_id is not None:
        return Decision(state, result={"delegation_id": cmd.delegation_id, "bound": False})
    bound = record.model_copy(update={"child_work_item_id": cmd.child_work_item_id})
    state = state.with_agent(with_running(agent, bound))
    event = DelegationBound(
        agent_id=state.agent_id,
        work_item_id=record.parent_work_item_id,
        delegation_id=record.id,
        child_agent_id=record.child_agent_id,
        child_work_item_id=cmd.child_work_item_id,
    )
    side = SideWrites(delegations=(bound,))
    return Decision(state, (event,), {"delegation_id": record.id, "bound": True}, side=side)


# ---------------------------------------------------------------- the child's side


def _taken(state: LedgerState, cmd: c.CreateSpawnedAgent) -> Decision:
    """The id exists: this very spawn created it (a re-send) and nothing changes, or another
    agent took it first; then a private child's delegation fails back to its parent."""
    agent = state.require_agent()
    mine = agent.spawned_by is not None and (
        cmd.spawned_by is not None
        and agent.spawned_by.delegation_id == cmd.spawned_by.delegation_id
    )
    if mine or cmd.spawned_by is None:
        return Decision(state, result={"agent_id": state.agent_id, "created": False})
    origin = cmd.spawned_by
    failed = c.RecordDelegationResult(
        command_id=step_command_id(origin.delegation_id, DelegationStep.RESULT),
        agent_id=origin.parent_agent_id,
        delegation_id=origin.delegation_id,
        status=DelegationStatus.FAILED,
        report=f"agent id {state.agent_id!r} was taken before the child could be created",
        child_agent_id=state.agent_id,
        child_work_item_id=None,
    )
    side = SideWrites(outbox=(failed,))
    return Decision(state, result={"agent_id": state.agent_id, "created": False}, side=side)


def _first_message(cmd: c.CreateSpawnedAgent, ctx: Context, agent_id: str) -> InboxMessage:
    parent = cmd.parent_agent_id
    origin = cmd.spawned_by
    if origin is None:
        return InboxMessage(
            id=f"msg_spawn_{parent}",
            agent_id=agent_id,
            origin=MessageOrigin.PEER,
            sender=parent,
            text=f"Agent {parent} created you with this message:\n{cmd.message}",
            created_at=ctx.now,
        )
    return InboxMessage(
        id=spawn_message_id(origin.delegation_id),
        agent_id=agent_id,
        origin=MessageOrigin.DELEGATION,
        sender=parent,
        text=(
            f"Agent {parent} spawned you ({origin.delegation_id}) with this message:\n"
            f"{cmd.message}\n"
            "Create a WorkItem for it now (CreateWorkItem): the first WorkItem you create in "
            "this turn is bound to the delegation, and the report you complete it with goes "
            f"back to {parent}."
        ),
        delegation_id=origin.delegation_id,
        created_at=ctx.now,
    )


def spawn_message_id(delegation_id: str) -> str:
    return f"msg_{delegation_id}"


def create_spawned_agent(state: LedgerState, cmd: c.CreateSpawnedAgent, ctx: Context) -> Decision:
    """Create the child: builtin, the resolved spec, its parent named, the message as its first
    inbox message (fresh input: it wakes the child with an `input` tick)."""
    if state.agent is not None:
        return _taken(state, cmd)
    spec = cmd.spec
    callback_token_id = token_id_of(cmd.callback_token_hash)
    limit = effective_wake_budget(spec, ctx.wake_limit)
    origin = cmd.spawned_by
    record = AgentRecord(
        state=AgentState(
            agent_id=state.agent_id, loop=AgentLoop.BUILTIN, wake_budget=WakeBudget(limit=limit)
        ),
        version=1,
        agent_token_hash=cmd.agent_token_hash,
        callback_token_id=callback_token_id,
        spec_version=1,
        spec_digest=spec_digest(spec),
        created_at=ctx.now,
        daily_token_budget=spec.limits.daily_token_budget,
        spawned_by=origin,
        parent_agent_id=cmd.parent_agent_id,
        peers=spec.peers,
    )
    cap = CapabilityRecord(token_id=callback_token_id, agent_id=state.agent_id, wait_id=None)
    state = state.with_agent(record)
    events: list[Event] = [AgentCreated(agent_id=state.agent_id, loop=AgentLoop.BUILTIN)]
    delegations: tuple[DelegationRecord, ...] = ()
    if origin is not None:
        received = DelegationRecord(
            id=origin.delegation_id,
            parent_agent_id=origin.parent_agent_id,
            parent_work_item_id=origin.parent_work_item_id,
            child_agent_id=state.agent_id,
            child_work_item_id=None,
            objective=origin.label,
            reason=f"spawned by {origin.parent_agent_id}",
            depth=max(len(origin.chain), 1),
            spawned=True,
            created_at=ctx.now,
        )
        delegations = (received,)
        events.append(DelegationReceived(agent_id=state.agent_id, delegation=received))
    inbox: tuple[InboxMessage, ...] = ()
    if cmd.message is not None:
        inbox = (_first_message(cmd, ctx, state.agent_id),)
        state, reset = fresh_input(state, "delegation" if origin else "peer")
        events += reset
    state, held = hold_token_budget(state, ctx.now)
    side = SideWrites(
        capabilities=((cmd.callback_token_hash, cap),),
        spec=(1, spec),
        inbox_push=inbox,
        delegations=delegations,
    )
    result = {"agent_id": state.agent_id, "created": True}
    return Decision(state, (*events, *held), result, side=side)


def bind_spawned(before: LedgerState, cmd: c.Command, decision: Decision, ctx: Context) -> Decision:
    """After a CreateWorkItem of a private child whose delegation is unbound, made in a turn
    that shows its spawn message: the new item carries the delegation as `delegated_from`,
    `delegation_bound` is recorded, and `<dlg>:bind` tells the parent."""
    if not isinstance(cmd, c.CreateWorkItem) or cmd.by_operator:
        return decision
    state = decision.state
    agent = state.agent
    if agent is None or agent.spawned_by is None:
        return decision
    spawned = agent.spawned_by
    if (
        spawned.bound_work_item_id is not None
        or spawned.delegation_id in agent.cancelled_delegations
        or spawn_message_id(spawned.delegation_id) not in agent.turn_inbox
    ):
        return decision
    item = state.items.get(cmd.work_item_id)
    if item is None or cmd.work_item_id in before.items:
        return decision
    bound_item: WorkItem = item.model_copy(update={"delegated_from": spawned.origin()})
    agent = agent.model_copy(
        update={"spawned_by": spawned.model_copy(update={"bound_work_item_id": item.id})}
    )
    state = state.with_item(bound_item).with_agent(agent)
    received = DelegationRecord(
        id=spawned.delegation_id,
        parent_agent_id=spawned.parent_agent_id,
        parent_work_item_id=spawned.parent_work_item_id,
        child_agent_id=state.agent_id,
        child_work_item_id=item.id,
        objective=spawned.label,
        reason=f"spawned by {spawned.parent_agent_id}",
        depth=max(len(spawned.chain), 1),
        spawned=True,
        created_at=item.created_at,
    )
    tell = c.RecordDelegationBound(
        command_id=step_command_id(spawned.delegation_id, DelegationStep.BIND),
        agent_id=spawned.parent_agent_id,
        delegation_id=spawned.delegation_id,
        child_agent_id=state.agent_id,
        child_work_item_id=item.id,
    )
    event = DelegationBound(
        agent_id=state.agent_id,
        work_item_id=item.id,
        delegation_id=spawned.delegation_id,
        child_agent_id=state.agent_id,
        child_work_item_id=item.id,
    )
    events = tuple(_with_bound(e, bound_item) for e in decision.events)
    side = replace(
        decision.side,
        delegations=(*decision.side.delegations, received),
        outbox=(*decision.side.outbox, tell),
    )
    result = {**(decision.result or {}), "work_item": view(state, bound_item)}
    return Decision(state, (*events, event), result, decision.warnings, side)


def _with_bound(event: Event, item: WorkItem) -> Event:
    """The creation event shows the item as stored (with its origin)."""
    if getattr(event, "work_item_id", None) == item.id and "work_item" in type(event).model_fields:
        return event.model_copy(update={"work_item": item})
    return event
