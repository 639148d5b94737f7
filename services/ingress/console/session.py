"""Console sessions and CSRF tokens: signed, stateless values derived from the operator token,
so any ingress worker or replica checks them without shared storage, and rotating the operator
token ends every session.

A session cookie is `v1.<expires unix seconds>.<nonce>.<mac>`; a form's CSRF token is a MAC of
the session's nonce (synchronizer token bound to the session, never stored). Before sign-in the
login form is protected the same way by a short-lived pre-session nonce cookie. Time is an
argument: callers pass `now` in unix seconds.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass

SESSION_COOKIE = "longrun_session"
LOGIN_COOKIE = "longrun_login"
"""Holds the pre-session nonce that the sign-in form's CSRF token is bound to."""
CSRF_FIELD = "csrf_token"
SESSION_SECONDS = 12 * 3600
"""A signed-in browser stays signed in for a working day, then signs in again."""
_VERSION = "v1"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class Session:
    nonce: str
    expires: int


class ConsoleKeys:
    """MACs keyed by a key derived from the operator token (never the token itself)."""

    def __init__(self, operator_token: str) -> None:
        self._key = hashlib.sha256(b"longrun-console-v1\n" + operator_token.encode()).digest()

    def _mac(self, purpose: str, value: str) -> str:
        return _b64(hmac.new(self._key, f"{purpose}\n{value}".encode(), hashlib.sha256).digest())

    def new_session(self, now: float) -> str:
        expires = int(now) + SESSION_SECONDS
        body = f"{_VERSION}.{expires}.{secrets.token_urlsafe(18)}"
        return f"{body}.{self._mac('session', body)}"

    def session(self, cookie: str | None, now: float) -> Session | None:
        """The session a cookie proves, or None (absent, forged, malformed or expired)."""
        if not cookie:
            return None
        parts = cookie.split(".")
        if len(parts) != 4 or parts[0] != _VERSION or not parts[1].isdigit():
            return None
        body = ".".join(parts[:3])
        if not hmac.compare_digest(parts[3], self._mac("session", body)):
            return None
        expires = int(parts[1])
        return Session(nonce=parts[2], expires=expires) if expires > now else None

    def csrf_for(self, nonce: str) -> str:
        return self._mac("csrf", nonce)

    def csrf_ok(self, nonce: str | None, presented: str | None) -> bool:
        if not nonce or not presented:
            return False
        return hmac.compare_digest(presented, self.csrf_for(nonce))


def new_login_nonce() -> str:
    return secrets.token_urlsafe(18)
