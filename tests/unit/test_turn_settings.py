"""Executor settings: the lease must expire before a dead executor's tick is reclaimed."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.turn_executor.app import ExecutorSettings


def test_defaults_serve_a_hundred_turns_per_process_on_the_scripted_provider() -> None:
    settings = ExecutorSettings()
    assert settings.executor_port == 9103
    assert settings.executor_concurrency == 100
    assert settings.provider_config().kind == "scripted"
    assert settings.lease_ttl == 15_000
    assert settings.reclaim_idle_ms > settings.lease_ttl


def test_an_unset_lease_ttl_follows_a_short_reclaim_idle_time() -> None:
    assert ExecutorSettings(reclaim_idle_ms=1500).lease_ttl == 1000


def test_a_lease_outliving_the_reclaim_idle_time_is_refused_at_start() -> None:
    with pytest.raises(ValidationError, match="must exceed LONGRUN_LEASE_TTL_MS"):
        ExecutorSettings(lease_ttl_ms=5000, reclaim_idle_ms=5000)


def test_openai_settings_reach_the_provider_config() -> None:
    settings = ExecutorSettings.model_validate(
        {
            "provider": "openai",
            "openai_base_url": "http://127.0.0.1:1/v1",
            "openai_api_key": "sk-x",
            "model": "m",
            "provider_timeout_s": 7,
            "model_max_retries": 1,
        }
    )
    config = settings.provider_config()
    assert (config.kind, config.base_url, config.api_key, config.model) == (
        "openai",
        "http://127.0.0.1:1/v1",
        "sk-x",
        "m",
    )
    assert (config.timeout_s, config.max_retries) == (7, 0)  # the turn retries, not the SDK
    assert settings.retry_policy().max_retries == 1
