"""Container tests need a running Docker daemon and docker-compose; every test here is marked
`docker`, which the default run deselects (`.ci/run` selects it when it can start dockerd).
The image is built once per session from deploy/Dockerfile on LONGRUN_BASE_IMAGE."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docker.tools import IMAGE, RedisContainer, build_image, docker


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.docker)
            # The first test also builds the image; a cold build with no layer cache is minutes.
            item.add_marker(pytest.mark.timeout(900))


@pytest.fixture(scope="session")
def image() -> str:
    assert shutil.which("docker"), "the docker CLI is not on PATH"
    assert shutil.which("docker-compose"), "docker-compose is not on PATH"
    docker("info")  # fails with the daemon's own message when none answers
    build_image()
    return IMAGE


@pytest.fixture
def redis_container() -> Iterator[RedisContainer]:
    redis = RedisContainer()
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()
