"""The scheduler: turns ledger events and due timers into ticks, one outstanding per agent.

Owns: the per-partition timer sets (`<prefix>:{pNNN}:timers`: WaitFor(timer) deadlines, recheck
deadlines and its own short re-decisions), each agent's due-recheck set, and tick de-duplication
(the agent's outstanding-tick marker and each tick's idempotency key). It writes no ledger record
and never sets focus; it recomputes each decision from the agent's current ledger state.

Reads: the partition event streams (`<prefix>:{pNNN}:events`) and fired-timer streams
(`<prefix>:{pNNN}:timers-fired`), both with consumer group `scheduler`, and the ledger's keys
through `shared.store.snapshots`. Writes: ticks (`<prefix>:{pNNN}:ticks` for builtin agents,
`<prefix>:wakes` for agents with `loop: external`), ledger commands (`<prefix>:{pNNN}:commands`:
`FireTimer`, `ConsumeRecheck`, `ParkAgent`, `RecordLivenessRepair`) and poison entries to
`<prefix>:dead-letter`.
"""
