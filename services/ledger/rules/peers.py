"""Ledger rules for messages between agents (SendMessage: agents that reply to each other).

The sender's side decides whether the recipient is a peer (its parent, its children, the agents
its spec lists in `peers`) and owes the recipient one `DeliverPeerMessage` through the outbox
(id `<message id>:deliver`), so a message is delivered once whatever crashes. The recipient's
side puts it in the inbox as a `peer` message and wakes the agent as a nudge: the turn it wakes
spends the wake budget, which only fresh outside input resets, so two agents that always answer
each other stop when their budgets are spent.
"""

from __future__ import annotations

from services.ledger.rules.state import Context, Decision, LedgerState, SideWrites
from shared.domain.errors import DomainError, ErrorKind
from shared.domain.records import InboxMessage, MessageOrigin
from shared.wire import commands as c
from shared.wire.events import MessageSent, PeerMessageReceived


def deliver_command_id(message_id: str) -> str:
    return f"{message_id}:deliver"


def peers_of(state: LedgerState) -> frozenset[str]:
    """Whom this agent may message: its parent, its children and its spec's peers."""
    agent = state.require_agent()
    parent = (agent.parent_agent_id,) if agent.parent_agent_id else ()
    return frozenset((*parent, *agent.children, *agent.peers))


def send_message(state: LedgerState, cmd: c.SendMessage, ctx: Context) -> Decision:
    to = cmd.args.to_agent
    allowed = peers_of(state)
    if to not in allowed or to == state.agent_id:
        raise DomainError(
            ErrorKind.PEER_NOT_ALLOWED,
            f"{to!r} is not this agent's parent, child or listed peer",
            details={"to_agent": to, "peers": sorted(allowed)},
        )
    if to not in state.agents_found:
        raise DomainError(ErrorKind.AGENT_NOT_FOUND, f"no agent {to!r} in this deployment")
    deliver = c.DeliverPeerMessage(
        command_id=deliver_command_id(cmd.message_id),
        agent_id=to,
        message_id=cmd.message_id,
        sender=state.agent_id,
        text=cmd.args.text,
        in_reply_to=cmd.args.reply_to,
    )
    event = MessageSent(
        agent_id=state.agent_id,
        work_item_id=state.current_id,
        message_id=cmd.message_id,
        to_agent=to,
        reply_to=cmd.args.reply_to,
    )
    result = {"message_id": cmd.message_id, "to_agent": to}
    return Decision(state, (event,), result, side=SideWrites(outbox=(deliver,)))


def deliver_peer_message(state: LedgerState, cmd: c.DeliverPeerMessage, ctx: Context) -> Decision:
    """Into the inbox as a `peer` message; a nudge, not fresh input: the budget is not reset,
    and the turn it wakes spends it."""
    agent = state.require_agent()
    message = InboxMessage(
        id=cmd.message_id,
        agent_id=state.agent_id,
        origin=MessageOrigin.PEER,
        sender=cmd.sender,
        reply_to=cmd.in_reply_to,
        text=cmd.text,
        created_at=ctx.now,
    )
    state = state.with_agent(agent.model_copy(update={"nudge_pending": True}))
    event = PeerMessageReceived(
        agent_id=state.agent_id,
        message_id=cmd.message_id,
        from_agent=cmd.sender,
        text=cmd.text,
        reply_to=cmd.in_reply_to,
    )
    result = {"message_id": cmd.message_id, "delivered": True}
    return Decision(state, (event,), result, side=SideWrites(inbox_push=(message,)))
