"""The webhook runner's HTTP connections: a fixed set of httpx clients, reused for every call,
whose free slots bound how many calls run at once.

Why several clients and not one: httpcore's connection pool rescans its connections (and, for
each idle one, all of them again) whenever a request starts or ends, so one pool of 256
keep-alive connections spent about 10 ms of CPU per call; pools of 8 spend about 1 ms
(docs/benchmarks.md, acceptance webhooks). The slots are handed out from one queue, so a call
waits only while all `concurrency` of them are busy, and a freed connection is reused by the next
call of its client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

CONNECTIONS_PER_CLIENT = 8


class ClientPool:
    """`concurrency` slots over ceil(concurrency / CONNECTIONS_PER_CLIENT) clients."""

    def __init__(self, concurrency: int) -> None:
        self.clients: list[httpx.AsyncClient] = []
        self.slots: asyncio.Queue[httpx.AsyncClient] = asyncio.Queue()
        left = concurrency
        while left > 0:
            size = min(left, CONNECTIONS_PER_CLIENT)
            limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
            client = httpx.AsyncClient(follow_redirects=False, limits=limits)
            self.clients.append(client)
            for _ in range(size):
                self.slots.put_nowait(client)
            left -= size

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client with a free connection slot, held for one call."""
        client = await self.slots.get()
        try:
            yield client
        finally:
            self.slots.put_nowait(client)

    async def close(self) -> None:
        for client in self.clients:
            await client.aclose()
