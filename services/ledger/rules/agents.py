"""Ledger rules for the agent itself: creation, and spec changes with their version and event.

A spec is compared by the digests of its top-level fields (kept on the agent record), so an
identical PUT changes nothing and records nothing, and a different one names what changed.
"""

from __future__ import annotations

import hashlib

import orjson

from services.ledger.rules.posture import hold_token_budget
from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.capability import token_id_of
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import AgentLoop, AgentState, WakeBudget
from shared.domain.specs import SPEC_FIELDS, AgentSpec, effective_wake_budget, spec_document
from shared.domain.stored import AgentRecord, CapabilityRecord
from shared.wire.commands import EnsureAgent
from shared.wire.events import AgentCreated, AgentSpecChanged


def spec_digest(spec: AgentSpec) -> dict[str, str]:
    """SHA-256 of each top-level field's canonical JSON (sorted keys, no spaces)."""
    document = spec_document(spec)
    return {
        name: hashlib.sha256(orjson.dumps(document[name], option=orjson.OPT_SORT_KEYS)).hexdigest()
        for name in SPEC_FIELDS
    }


def ensure_agent(state: LedgerState, cmd: EnsureAgent, ctx: Context) -> Decision:
    if state.agent is None:
        return _create(state, cmd, ctx)
    agent = state.agent
    if cmd.loop is not None and cmd.loop is not agent.state.loop:
        raise DomainError(
            ErrorKind.LOOP_CHANGE_REFUSED,
            f"agent {state.agent_id!r} runs the {agent.state.loop.value} loop; "
            "an agent's loop never changes after creation",
            details={"loop": agent.state.loop.value, "requested": cmd.loop.value},
        )
    if cmd.spec is None:
        return Decision(state=state, result=_answer(agent, created=False, changed=()))
    return _change_spec(state, agent, cmd.spec, ctx)


def _answer(agent: AgentRecord, *, created: bool, changed: tuple[str, ...]) -> dict[str, object]:
    return {
        "created": created,
        "agent_id": agent.state.agent_id,
        "loop": agent.state.loop.value,
        "spec_version": agent.spec_version,
        "changed": list(changed),
    }


def _create(state: LedgerState, cmd: EnsureAgent, ctx: Context) -> Decision:
    spec = cmd.spec or AgentSpec()
    loop = cmd.loop or AgentLoop.BUILTIN
    callback_token_id = token_id_of(cmd.callback_token_hash)
    limit = effective_wake_budget(spec, ctx.wake_limit)
    record = AgentRecord(
        state=AgentState(agent_id=state.agent_id, loop=loop, wake_budget=WakeBudget(limit=limit)),
        version=1,
        agent_token_hash=cmd.agent_token_hash,
        callback_token_id=callback_token_id,
        spec_version=1,
        spec_digest=spec_digest(spec),
        created_at=ctx.now,
        daily_token_budget=spec.limits.daily_token_budget,
        peers=spec.peers,
    )
    cap = CapabilityRecord(token_id=callback_token_id, agent_id=state.agent_id, wait_id=None)
    state = state.with_agent(record)
    side = SideWrites(capabilities=((cmd.callback_token_hash, cap),), spec=(1, spec))
    events = (AgentCreated(agent_id=state.agent_id, loop=loop),)
    return Decision(state, events, _answer(record, created=True, changed=()), side=side)


def _change_spec(state: LedgerState, agent: AgentRecord, spec: AgentSpec, ctx: Context) -> Decision:
    digest = spec_digest(spec)
    changed = tuple(name for name in SPEC_FIELDS if agent.spec_digest.get(name) != digest[name])
    if not changed:
        return Decision(state=state, result=_answer(agent, created=False, changed=()))
    version = agent.spec_version + 1
    budget = agent.state.wake_budget.model_copy(
        update={"limit": effective_wake_budget(spec, ctx.wake_limit)}
    )
    agent = agent.model_copy(
        update={
            "spec_version": version,
            "spec_digest": digest,
            "state": agent.state.model_copy(update={"wake_budget": budget}),
            # Kept on the record: the scheduler holds a spent budget without reading the spec.
            "daily_token_budget": spec.limits.daily_token_budget,
            "peers": spec.peers,
            # The new spec may name other variables: tried again at once.
            "missing_secret": None,
        }
    )
    state = state.with_agent(agent)
    event = AgentSpecChanged(agent_id=state.agent_id, spec_version=version, changed=changed)
    # A lower limit the day's tokens already spent holds the agent from this write on.
    state, held = hold_token_budget(state, ctx.now)
    side = SideWrites(spec=(version, spec))
    answer = _answer(state.require_agent(), created=False, changed=changed)
    return Decision(state, (event, *held), answer, side=side)
