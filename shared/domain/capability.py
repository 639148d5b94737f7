"""Capability and agent tokens: how a token names its agent, and how it is stored (hashed)."""

from __future__ import annotations

import hashlib
import hmac

TOKEN_SEPARATOR = "~"  # noqa: S105 - a separator, not a secret
"""Agent ids never contain `~`, so `<agent_id>~<secret>` routes a callback to its partition
without a lookup, while the ledger still checks the token's hash."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_id_of(token_hash: str) -> str:
    """A short public id for provenance and logs; never enough to rebuild the token."""
    return "tok_" + token_hash[:16]


def agent_of_token(token: str) -> str | None:
    agent_id, sep, secret = token.rpartition(TOKEN_SEPARATOR)
    if not sep or not agent_id or len(secret) < 16:
        return None
    return agent_id


def same_hash(a: str, b: str) -> bool:
    """Constant-time comparison of two token hashes."""
    return hmac.compare_digest(a.encode(), b.encode())
