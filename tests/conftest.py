"""Fixtures shared by every test tier."""

from __future__ import annotations

import os

import pytest

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(scope="session")
def redis_url() -> str:
    """The Redis server integration tests use (`.ci/run` starts one if none answers)."""
    return os.environ.get("REDIS_URL", DEFAULT_REDIS_URL)
