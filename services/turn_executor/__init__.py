"""The turn executor: runs the turns of `builtin` agents, at most one at a time per agent, many
agents' turns at once per process, and any number of processes.

Owns: turn leases (`<prefix>:{pNNN}:agent:<id>:lease`, one per agent, each taken with a fresh
fencing token, so a crashed executor's turn is retried by another as a new turn told that the
previous attempt was interrupted). Reads: the partition tick streams `<prefix>:{pNNN}:ticks`
(consumer group `turn-executor`), the ledger read model and the agent home files. Writes: ledger
commands (`BeginTurn`, the WorkItem tool calls, `RefreshPlanArtifact`, `RecordTranscript`,
`RecordToolCallStart`/`RecordToolCallFinish` around each MCP call and command, `FinishTurn`) to
`<prefix>:{pNNN}:commands`, awaiting replies on its own `<prefix>:replies:<process>` stream;
plan files and agent files under the agent home; poison ticks to `<prefix>:dead-letter`. A turn is
served by `service`: opened by `opening`, run round by round in `round_loop`, closed by `closing`.
It projects each round's prompt (`prompt`, `summary`, `projection`, `review`), asks the model
provider (`providers`), runs the round's tool calls (`rounds`, on the `turn`'s state, with
`turn_writes` for its plan refreshes and transcript; MCP servers through `mcp_client`, stdio ones
as children in `mcp_children`; RunCommand in the bubblewrap `sandbox` through `command_calls`,
whose state each process reports in `<prefix>:sandbox`) and promotes the completion report
(`promotion`).
"""
