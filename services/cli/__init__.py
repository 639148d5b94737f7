"""The `longrun` command line: runs the stack (`up`: every service as its own process, with a
private Redis when none is given), the end-to-end `demo`, and the operator's verbs over the HTTP
API (agents, messages, WorkItems, callbacks, the board and its org mirror, history verify).

Owns nothing durable and reads or writes no stream: it talks to ingress over HTTP and supervises
processes. It imports no other service (import-linter's independence contract).
"""
