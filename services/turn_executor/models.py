"""Which model runs an agent's turns: the spec's `model` when it names one, else the executor's
default (LONGRUN_PROVIDER / LONGRUN_MODEL), with credentials and endpoints from the process
environment. Providers are built once per distinct model configuration and shared by turns."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from typing import Protocol

from services.turn_executor.model_calls import ModelTarget
from services.turn_executor.providers import (
    Provider,
    ProviderConfig,
    ProviderKind,
    build_provider,
)


class ModelSpec(Protocol):
    """The `model` part of an agent's spec, as far as choosing a provider goes."""

    @property
    def provider(self) -> ProviderKind: ...
    @property
    def name(self) -> str | None: ...
    @property
    def temperature(self) -> float | None: ...
    @property
    def max_output_tokens(self) -> int | None: ...


SCRIPTED_MODEL = "scripted"
"""The model name the scripted provider reports when the spec names none."""


class Models:
    def __init__(self, default: ProviderConfig, by_kind: Mapping[ProviderKind, ProviderConfig]):
        """`default` serves agents without a model in their spec; `by_kind` holds each
        provider's endpoint, credentials and default model name."""
        self.default = default
        self.by_kind = dict(by_kind)
        self._built: dict[ProviderConfig, Provider] = {}
        self._building = asyncio.Lock()

    def config_for(self, spec: ModelSpec | None) -> ProviderConfig:
        if spec is None:
            return self.default
        base = self.default if spec.provider == self.default.kind else self.by_kind[spec.provider]
        name = spec.name or base.model
        return replace(
            base,
            model=name,
            temperature=spec.temperature,
            max_output_tokens=spec.max_output_tokens,
        )

    async def target(self, spec: ModelSpec | None) -> ModelTarget:
        config = self.config_for(spec)
        provider = self._built.get(config)
        if provider is None:
            # Built in a thread: the first use of a provider imports its SDK, which takes
            # seconds on a busy machine, and the lease beats of running turns must go on.
            async with self._building:
                provider = self._built.get(config)
                if provider is None:
                    provider = await asyncio.to_thread(build_provider, config)
                    self._built[config] = provider
        return ModelTarget(config=config, provider=provider)

    def seed(self, provider: Provider) -> None:
        """Serve the default configuration with a provider built elsewhere (tests, benchmarks)."""
        self._built[self.default] = provider

    async def close(self) -> None:
        for provider in self._built.values():
            await provider.close()
        self._built.clear()
