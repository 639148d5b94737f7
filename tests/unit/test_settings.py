"""CommonSettings: the documented defaults, derived names and URLs, and validation at start.

Tests construct settings and never touch os.environ: settings are built in each app.py and
passed down. To read the defaults without whatever LONGRUN_* variables the machine happens to
have, `Isolated` reads its constructor arguments and nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from shared.settings import DEFAULT_REDIS_URL, CommonSettings
from shared.wire.names import Names


class Isolated(CommonSettings):
    """CommonSettings fed only by its constructor arguments: no environment, no dotenv file."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def test_isolated_settings_have_the_same_fields() -> None:
    assert Isolated.model_fields.keys() == CommonSettings.model_fields.keys()


def test_defaults_are_the_documented_ones() -> None:
    settings = Isolated()
    assert settings.redis_url == DEFAULT_REDIS_URL == "redis://127.0.0.1:6379/0"
    assert settings.prefix == "lr"
    assert settings.partitions == 16
    assert settings.agent_home == Path("./.longrun/home")
    assert settings.max_wake_cycles == 25
    assert settings.max_body_bytes == 262_144
    assert settings.http_port == 8080
    assert settings.provider == "scripted"
    assert settings.public_url is None
    assert settings.operator_token is None
    assert settings.openai_api_key is None


def test_defaults_do_not_depend_on_the_subclass() -> None:
    """What Isolated reports is CommonSettings' own field defaults."""
    for name, field in CommonSettings.model_fields.items():
        if not field.is_required():
            assert getattr(Isolated(), name) == field.get_default(call_default_factory=True)


def test_keyword_arguments_set_every_documented_value() -> None:
    settings = CommonSettings(
        redis_url="redis://cache:6380/2",
        prefix="acme",
        partitions=64,
        agent_home=Path("/srv/agents"),
        max_wake_cycles=5,
        max_body_bytes=4096,
        provider="openai",
        openai_base_url="http://llm.local/v1",
        openai_api_key=SecretStr("sk-test"),
        model="local-model",
        public_url="https://longrun.example",
        http_port=9090,
        operator_token=SecretStr("op-token"),
    )
    assert settings.redis_url == "redis://cache:6380/2"
    assert (settings.prefix, settings.partitions) == ("acme", 64)
    assert settings.agent_home == Path("/srv/agents")
    assert (settings.max_wake_cycles, settings.max_body_bytes) == (5, 4096)
    assert (settings.provider, settings.model) == ("openai", "local-model")
    assert settings.openai_api_key is not None
    assert settings.openai_api_key.get_secret_value() == "sk-test"
    assert settings.operator_token is not None
    assert settings.operator_token.get_secret_value() == "op-token"
    assert settings.http_port == 9090


def test_secrets_do_not_show_in_repr() -> None:
    settings = Isolated(operator_token=SecretStr("op-token"), openai_api_key=SecretStr("sk-x"))
    assert "op-token" not in repr(settings)
    assert "sk-x" not in repr(settings)


def test_redis_url_is_read_from_the_unprefixed_alias() -> None:
    settings = CommonSettings.model_validate({"REDIS_URL": "redis://elsewhere:6379/1"})
    assert settings.redis_url == "redis://elsewhere:6379/1"


def test_names_use_the_prefix_and_partitions() -> None:
    assert Isolated().names() == Names(prefix="lr", partitions=16)
    assert Isolated(prefix="acme", partitions=4).names() == Names(prefix="acme", partitions=4)


def test_callback_base_url_defaults_to_localhost_and_the_http_port() -> None:
    assert Isolated().callback_base_url() == "http://127.0.0.1:8080"
    assert Isolated(http_port=9000).callback_base_url() == "http://127.0.0.1:9000"


@pytest.mark.parametrize(
    ("public_url", "expected"),
    [
        ("https://longrun.example", "https://longrun.example"),
        ("https://longrun.example/", "https://longrun.example"),
        ("https://example.org/longrun/", "https://example.org/longrun"),
    ],
)
def test_callback_base_url_uses_the_public_url_without_a_trailing_slash(
    public_url: str, expected: str
) -> None:
    assert Isolated(public_url=public_url, http_port=9000).callback_base_url() == expected


@pytest.mark.parametrize(
    "bad",
    [
        {"partitions": 0},
        {"partitions": 1001},
        {"max_wake_cycles": 0},
        {"max_body_bytes": 1023},
        {"http_port": 0},
        {"http_port": 65536},
        {"metrics_port": -1},
        {"provider": "gemini"},
    ],
    ids=lambda bad: "-".join(f"{k}={v}" for k, v in bad.items()),
)
def test_misconfiguration_fails_at_construction(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Isolated(**bad)


def test_settings_are_frozen() -> None:
    settings = Isolated()
    with pytest.raises(ValidationError):
        settings.prefix = "other"  # type: ignore[misc]


def test_the_archive_defaults_to_a_directory_beside_the_agent_homes() -> None:
    """LONGRUN_ARCHIVE_DIR unset: `<LONGRUN_AGENT_HOME>/../archive`, one directory for every
    service that shares the homes' parent, so ingress reads what the scheduler wrote."""
    assert Isolated().archive_dir is None
    assert Isolated(agent_home=Path("/var/lib/longrun/home")).archive_root() == Path(
        "/var/lib/longrun/archive"
    )
    chosen = Isolated(agent_home=Path("/srv/home"), archive_dir=Path("/mnt/archive"))
    assert chosen.archive_root() == Path("/mnt/archive")
