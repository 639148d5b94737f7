"""Ledger rule for a tick an executor could not serve because it lacks an environment variable
the agent's spec names: no turn begins, the agent parks idle with the hold recorded (why-not-
running `missing_secret`), and the scheduler tries again at the hold's `retry_at`. A spec change
or a turn that begins clears the hold."""

from __future__ import annotations

from services.ledger.rules.state import Context, Decision, LedgerState
from services.ledger.rules.turns import check_fence
from shared.domain.records import Posture
from shared.wire.commands import ParkReason, RecordMissingSecret
from shared.wire.events import AgentParked


def record_missing_secret(state: LedgerState, cmd: RecordMissingSecret, ctx: Context) -> Decision:
    agent = state.require_agent()
    check_fence(state, cmd.fencing_token)
    hold = cmd.hold
    if hold.spec_version != agent.spec_version:
        # The spec changed after the executor read it: the new one is tried at once.
        return Decision(state=state, result={"parked": False, "spec_version": agent.spec_version})
    agent = agent.model_copy(
        update={
            "state": agent.state.model_copy(update={"posture": Posture.IDLE}),
            "missing_secret": hold,
        }
    )
    state = state.with_agent(agent)
    parked = AgentParked(
        agent_id=state.agent_id,
        posture=Posture.IDLE,
        reason=ParkReason.MISSING_SECRET.value,
        name=hold.name,
    )
    result = {"parked": True, "name": hold.name, "retry_at": hold.retry_at.isoformat()}
    return Decision(state, (parked,), result)
