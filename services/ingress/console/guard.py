"""What the console keeps in Redis beside its signed cookies: failed sign-ins per client address
(the throttle) and sessions signed out on the server (the revocations), both expiring on their
own, so every ingress worker and replica enforces the same limits.

The throttle reserves before it checks: each sign-in attempt counts first and a correct operator
token gives its count back, so concurrent guesses from one address can never evaluate more than
`MAX_FAILURES` wrong tokens in a window, and a throttled address is refused whatever it sends.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.store.client import AnyRedis
from shared.wire.names import Names

MAX_FAILURES = 5
"""Failed sign-ins one address may make in its window; the next attempt answers 429."""
WINDOW_SECONDS = 60
"""The window starts at the address's first failure and lasts a minute, then forgets."""


@dataclass(frozen=True, slots=True)
class SignInGuard:
    redis: AnyRedis
    names: Names

    async def reserve(self, address: str) -> int:
        """Count one sign-in attempt from `address`: 0 when it may be checked, else the seconds
        until its window ends (the caller answers 429 with that Retry-After)."""
        key = self.names.console_sign_in_failures(address)
        # Not a transaction (a cluster pipeline is not one either): every attempt sets the
        # expiry if it is missing, so a crash between INCR and EXPIRE cannot lock out for ever.
        pipe = self.redis.pipeline(transaction=False)
        pipe.incr(key)
        pipe.expire(key, WINDOW_SECONDS, nx=True)
        pipe.ttl(key)
        count, _, ttl = await pipe.execute()
        if int(count) <= MAX_FAILURES:
            return 0
        return max(int(ttl), 1)

    async def succeeded(self, address: str) -> None:
        """A correct operator token: its attempt is not a failure."""
        await self.redis.decr(self.names.console_sign_in_failures(address))

    async def revoke(self, nonce: str, seconds_left: int) -> None:
        """Sign a session out for every worker until it would have expired anyway."""
        await self.redis.set(self.names.console_revoked(nonce), b"1", ex=max(seconds_left, 1))

    async def revoked(self, nonce: str) -> bool:
        return bool(await self.redis.exists(self.names.console_revoked(nonce)))
