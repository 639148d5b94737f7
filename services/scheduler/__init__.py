"""The scheduler: turns ledger events and due timers into ticks, one outstanding per agent.

Owns: the per-partition timer sets (`<prefix>:{pNN}:timers`: WaitFor(timer) deadlines and recheck
deadlines) and tick de-duplication (the agent's outstanding-tick key and each tick's idempotency
key). It writes no ledger record; it recomputes each decision from the agent's ledger state.

Reads: the partition event streams (`<prefix>:{pNN}:events`, consumer group `scheduler`), the
partition timers-fired streams (`<prefix>:{pNN}:timers-fired`), and the ledger read model.
Writes: ticks (`<prefix>:{pNN}:ticks` for builtin agents, `<prefix>:wakes` for agents with
`loop: external`) and ledger commands (`<prefix>:{pNN}:commands`: `FireTimer` for fired wait
timers, `ConsumeRecheck` for delivered rechecks).
"""
