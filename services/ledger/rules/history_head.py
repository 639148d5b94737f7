"""Signing an agent's history head: the chain tip as committed, signed with the ledger's key.
Changes nothing and records nothing (signing is not an event of the agent's life)."""

from __future__ import annotations

from services.ledger.rules.state import Context, Decision, LedgerState
from shared.domain.errors import DomainError, ErrorKind
from shared.wire.commands import SignHistoryHead


def sign_history_head(state: LedgerState, command: SignHistoryHead, ctx: Context) -> Decision:
    agent = state.require_agent()
    if ctx.signing_key is None:
        # The service always has one (configured or generated at start); a bare rule test may not.
        raise DomainError(
            ErrorKind.UNKNOWN_TOOL, "the ledger does not apply sign_history_head without a key"
        )
    head = ctx.signing_key.sign_head(state.agent_id, agent.history_seq, agent.history_head, ctx.now)
    return Decision(state=state, result=head.model_dump(mode="json"))
