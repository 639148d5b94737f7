"""The ledger: sole owner of WorkItems, waiting intents, trigger counts, agent state, inboxes,
briefs, delivery summaries and each agent's hash-chained history.

Reads the partitioned command streams `<prefix>:{pNNN}:commands` (group `ledger`); writes ledger
records, the partition event streams `<prefix>:{pNNN}:events`, command replies to each sender's
`<prefix>:replies:<process>` stream, and poison entries to `<prefix>:dead-letter`.
"""
