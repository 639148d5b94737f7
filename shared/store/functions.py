"""Loading longrun's Redis Functions library (shared/store/longrun.lua) into a server.

Every service loads the library at start, so during a rolling upgrade old and new processes
take turns at it. A loader therefore never replaces a newer library: it reads what is loaded
(`lr_version`: the version and the source's digest) and loads its own only when nothing is
loaded, an older version is, or the same version from a different source (a development build).
An old process started after a new one keeps the new library; it must only call functions the
new one still has (docs/operations.md, "Upgrading").
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from typing import Any

import structlog
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.exceptions import ResponseError

from shared.store.protocol import Fn, Library

log = structlog.get_logger("longrun.functions")

_SOURCE = resources.files("shared.store").joinpath("longrun.lua").read_text()
LIBRARY_DIGEST = hashlib.sha256(_SOURCE.encode()).hexdigest()[:16]
LIBRARY_SOURCE = _SOURCE.replace("@SOURCE_DIGEST@", LIBRARY_DIGEST)


def should_load(loaded: tuple[int, str] | None, version: int, digest: str) -> bool:
    """Whether a loader holding (`version`, `digest`) replaces what is `loaded` (None: no
    library, or one from before versions existed)."""
    if loaded is None:
        return True
    loaded_version, loaded_digest = loaded
    return loaded_version < version or (loaded_version == version and loaded_digest != digest)


async def load_functions(client: Redis | RedisCluster, *, source: str = LIBRARY_SOURCE) -> None:
    """Load the library on every primary that holds no newer one; safe to repeat at every
    start. `source` is for tests (another build of the library)."""
    version, digest = library_of(source)
    if isinstance(client, RedisCluster):
        # Each primary runs the Functions for the slots it owns, so each needs the library;
        # replicas receive it through replication (and refuse FUNCTION LOAD).
        await client.initialize()  # learns the nodes: an unused client knows none yet
        for node in client.get_primaries():
            await _load_on(client, source, version, digest, node)
        return
    await _load_on(client, source, version, digest, None)


async def _load_on(
    client: Redis | RedisCluster, source: str, version: int, digest: str, node: ClusterNode | None
) -> None:
    target: dict[str, Any] = {"target_nodes": node} if node is not None else {}
    try:
        loaded: tuple[int, str] | None = Library.parse(
            await client.execute_command("FCALL_RO", Fn.VERSION, 0, **target)
        )
    except ResponseError:  # no library, or one without lr_version
        loaded = None
    if not should_load(loaded, version, digest):
        if loaded is not None and loaded[0] > version:
            log.warning("functions_newer_loaded", loaded=loaded[0], ours=version)
        return
    await client.execute_command("FUNCTION LOAD", "REPLACE", source, **target)


def library_of(source: str) -> tuple[int, str]:
    """The version and digest a library source declares."""
    version = re.search(r"^local LIBRARY_VERSION = (\d+)$", source, re.M)
    digest = re.search(r"^local SOURCE_DIGEST = '([^']*)'$", source, re.M)
    if version is None or digest is None:
        raise ValueError("the library declares no LIBRARY_VERSION or SOURCE_DIGEST")
    return int(version[1]), digest[1]
