"""The turn executor: runs the turns of `builtin` agents, one at a time per agent.

It owns turn leases (one per agent, with a fencing token, so a crashed executor's turn is
retried by another as a new, interrupted-aware turn). It reads scheduler ticks from the ticks
stream, projects the prompt (`projection`), calls the model provider, sends each WorkItem tool
call to the ledger as a command (with the same round's completion report, `promotion`) and waits
on its reply stream, and runs the file tools itself inside the agent's home, where it writes the
plan files (`files`) and reports their new descriptors to the ledger.
"""
