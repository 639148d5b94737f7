"""Ingress: the HTTP API and the callbacks stream, turned into ledger commands.

Owns nothing durable: every change is a ledger command, every read goes through the ledger's
read model, and its rate-limit buckets live only in process memory. Reads HTTP requests, the
stream `<prefix>:callbacks` (group `ingress`) and the ledger read model; writes ledger commands
to `<prefix>:{pNNN}:commands`, reads their replies on its own `<prefix>:replies:<process>`
stream, and moves refused stream entries to `<prefix>:dead-letter`.
"""
