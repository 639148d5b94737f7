"""Loading the Functions library never downgrades it: during a rolling upgrade an old process
that starts after a new one keeps the new library (shared/store/functions.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from shared.store.client import AnyRedis, connect
from shared.store.functions import LIBRARY_SOURCE, library_of, load_functions, should_load

VERSION, DIGEST = library_of(LIBRARY_SOURCE)
REGISTER_VERSION = """redis.register_function{function_name = 'lr_version', callback = lr_version,
                        flags = {'no-writes'}}"""


def build(version: int, digest: str) -> str:
    """Another build of the library: its version and digest changed, the rest the same."""
    return LIBRARY_SOURCE.replace(
        f"local LIBRARY_VERSION = {VERSION}\n", f"local LIBRARY_VERSION = {version}\n"
    ).replace(f"local SOURCE_DIGEST = '{DIGEST}'", f"local SOURCE_DIGEST = '{digest}'")


async def loaded(redis: AnyRedis) -> tuple[int, str]:
    version, digest = await redis.execute_command("FCALL_RO", "lr_version", 0)
    return int(version), digest.decode()


@pytest.fixture
async def server(redis_url: str) -> AsyncIterator[AnyRedis]:
    """The test server, left with this build's library whatever the test loaded."""
    redis = connect(redis_url)
    yield redis
    await redis.execute_command("FUNCTION LOAD", "REPLACE", LIBRARY_SOURCE)
    assert await loaded(redis) == (VERSION, DIGEST)
    await redis.aclose()


@pytest.mark.parametrize(
    ("first", "kept"),
    [
        ((VERSION + 1, "newer"), (VERSION + 1, "newer")),
        ((VERSION - 1, "older"), (VERSION, DIGEST)),
        ((VERSION, "another-build"), (VERSION, DIGEST)),
        ((VERSION, DIGEST), (VERSION, DIGEST)),
    ],
    ids=["newer-stays", "older-replaced", "same-version-other-build-replaced", "same-kept"],
)
async def test_a_loader_replaces_only_an_older_or_different_build(
    server: AnyRedis, first: tuple[int, str], kept: tuple[int, str]
) -> None:
    await server.execute_command("FUNCTION LOAD", "REPLACE", build(*first))
    assert await loaded(server) == first
    await load_functions(server)
    assert await loaded(server) == kept


async def test_an_older_loader_leaves_the_newer_library(server: AnyRedis) -> None:
    await load_functions(server)
    await load_functions(server, source=build(VERSION - 1, "older"))
    assert await loaded(server) == (VERSION, DIGEST)


async def test_a_library_from_before_versions_is_replaced(server: AnyRedis) -> None:
    assert REGISTER_VERSION in LIBRARY_SOURCE
    await server.execute_command(
        "FUNCTION LOAD", "REPLACE", LIBRARY_SOURCE.replace(REGISTER_VERSION, "")
    )
    await load_functions(server)
    assert await loaded(server) == (VERSION, DIGEST)


def test_the_rule() -> None:
    assert should_load(None, 3, "a")
    assert should_load((2, "a"), 3, "a")
    assert should_load((3, "b"), 3, "a")
    assert not should_load((3, "a"), 3, "a")
    assert not should_load((4, "b"), 3, "a")
