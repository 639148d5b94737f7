"""Typed settings read from the environment (docs/contract.md §10); built in each app.py."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.domain.records import DEFAULT_WAKE_BUDGET
from shared.domain.webhooks import WebhookAllow
from shared.wire.names import Names

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


class CommonSettings(BaseSettings):
    """What every service needs. Services subclass this with their own fields."""

    model_config = SettingsConfigDict(env_prefix="LONGRUN_", extra="ignore", frozen=True)

    redis_url: str = Field(
        default=DEFAULT_REDIS_URL, validation_alias=AliasChoices("REDIS_URL", "redis_url")
    )
    redis_cluster: bool = False
    """Treat `redis_url` as one seed node of a Redis Cluster (LONGRUN_REDIS_CLUSTER=true)."""
    prefix: str = "lr"
    partitions: int = Field(default=16, ge=1, le=1000)
    agent_home: Path = Path("./.longrun/home")
    max_wake_cycles: int = Field(default=DEFAULT_WAKE_BUDGET, ge=1)
    max_body_bytes: int = Field(default=262_144, ge=1024)
    """Bytes of a request body (ingress) and of a tool call's arguments (executor) at most."""
    search_timeout_ms: int = Field(default=2_000, ge=1)
    """How long one SearchFiles call may take before it answers `pattern_too_slow`."""
    provider: Literal["scripted", "openai", "anthropic"] = "scripted"
    openai_base_url: str | None = None
    openai_api_key: SecretStr | None = None
    anthropic_base_url: str | None = None
    anthropic_api_key: SecretStr | None = None
    model: str = "gpt-4o-mini"
    public_url: str | None = None
    http_port: int = Field(default=8080, ge=1, le=65535)
    http_host: str = "127.0.0.1"
    """Interface every service binds its HTTP port to (0.0.0.0 in containers)."""
    operator_token: SecretStr | None = None
    metrics_port: int = Field(default=0, ge=0, le=65535)
    """Port for /metrics of non-HTTP services; 0 picks a free one."""
    log_level: str = "INFO"
    archive_dir: Path | None = None
    """LONGRUN_ARCHIVE_DIR: where history segments and finished WorkItems go when they leave
    Redis (one directory per agent); unset, `<LONGRUN_AGENT_HOME>/../archive`. The scheduler's
    archiver writes it; ingress and the executors read it (docs/operations.md)."""

    webhook_allow: str = ""
    """LONGRUN_WEBHOOK_ALLOW: where agent-set webhook checks may point, a comma list of `host`,
    `host:port`, addresses and CIDRs (shared/domain/webhooks.py); empty, agents may set none.
    Read by the ledger (a check is refused when set) and the scheduler (a call is refused when
    its host resolves to an address the list does not allow)."""
    webhook_secret: SecretStr | None = None
    """LONGRUN_WEBHOOK_SECRET: the HMAC-SHA256 key the scheduler signs webhook calls with
    (unset: every webhook check fails, since it cannot be signed). `longrun up` makes one."""

    @field_validator("webhook_allow")
    @classmethod
    def _allow_list_parses(cls, value: str) -> str:
        WebhookAllow.parse(value)  # AllowListError is a ValueError: the setting is refused
        return value

    def webhook_allowlist(self) -> WebhookAllow:
        return WebhookAllow.parse(self.webhook_allow)

    def names(self) -> Names:
        return Names(prefix=self.prefix, partitions=self.partitions)

    def archive_root(self) -> Path:
        return self.archive_dir or self.agent_home.parent / "archive"

    def callback_base_url(self) -> str:
        base = self.public_url or f"http://127.0.0.1:{self.http_port}"
        return base.rstrip("/")
