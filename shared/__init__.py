"""longrun's shared core: the WorkItem domain (pure), the wire contract, settings and metrics.

Every service imports from here; nothing here imports a service.
"""
