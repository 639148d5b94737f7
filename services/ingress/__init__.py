"""The ingress service (being built)."""
