"""One model call of a turn, retried through transient failures: exponential backoff with full
jitter, `Retry-After` honoured, up to the policy's retries after the first attempt. Each attempt
is measured (`longrun_model_calls_total`, `longrun_model_call_seconds`, tokens on success).

While it waits, the turn's lease keeper goes on renewing the lease and touching the tick entry
(its beats are timers, not this task), so a long outage never looks like a dead executor; a
lease lost meanwhile ends the wait.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import structlog

from services.turn_executor.lease import LeaseKeeper
from services.turn_executor.providers import (
    ChatMessage,
    ModelFailure,
    Provider,
    ProviderConfig,
    ProviderRound,
    ToolSpec,
)
from shared.domain.model_failures import (
    ModelOutage,
    OutageBackoff,
    RetryPolicy,
    next_outage,
    parse_retry_after,
    retry_delay,
)
from shared.domain.usage import TurnUsage
from shared.metrics import Metrics

log = structlog.get_logger("longrun.executor")


@dataclass(frozen=True, slots=True)
class ModelTarget:
    """The model a turn talks to: how it was configured, and the provider that reaches it."""

    config: ProviderConfig
    provider: Provider


class ModelUnavailable(Exception):
    """Transient failures outlasted the retries: the turn ends `model_unavailable`."""

    def __init__(self, provider: str, status: int | None, message: str) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status


class ModelCaller:
    def __init__(
        self,
        metrics: Metrics,
        policy: RetryPolicy,
        *,
        clock: Callable[[], datetime],
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.metrics = metrics
        self.policy = policy
        self.clock = clock
        self.sleep = sleep
        self.jitter = jitter

    async def call(
        self,
        target: ModelTarget,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        keeper: LeaseKeeper,
    ) -> ProviderRound:
        """The model's answer; raises ModelUnavailable once retries run out, the provider's
        error at once for a permanent failure, LeaseLost if the lease went while waiting."""
        retry = 0
        while True:
            started = time.perf_counter()
            try:
                answer = await target.provider.complete(messages, tools)
            except ModelFailure as failure:
                self._observe(target, "transient" if failure.transient else "permanent", started)
                if not failure.transient:
                    raise
                retry += 1
                delay = self._delay(failure, retry)
                if delay is None:
                    kind = target.config.kind
                    raise ModelUnavailable(kind, failure.status, str(failure)) from failure
                log.info("model_call_retry", model=target.config.label, retry=retry, delay=delay)
                await self.sleep(delay)
                keeper.check()
                continue
            except Exception:
                self._observe(target, "error", started)
                raise
            self._observe(target, "success", started, answer)
            return answer

    def _delay(self, failure: ModelFailure, retry: int) -> float | None:
        after = parse_retry_after(failure.retry_after, failure.retry_after_ms, self.clock())
        return retry_delay(self.policy, retry, after, self.jitter())

    def _observe(
        self,
        target: ModelTarget,
        outcome: str,
        started: float,
        answer: ProviderRound | None = None,
    ) -> None:
        provider, model = target.config.kind, target.config.model
        m = self.metrics
        m.model_calls.labels(provider=provider, model=model, outcome=outcome).inc()
        m.model_call_seconds.labels(provider=provider, model=model).observe(
            time.perf_counter() - started
        )
        if answer is None:
            return
        usage = answer.usage
        for kind, count in (
            ("input", usage.input_tokens),
            ("cached_input", usage.cached_input_tokens),
            ("output", usage.output_tokens),
        ):
            if count:
                m.model_tokens.labels(provider=provider, model=model, kind=kind).inc(count)


@dataclass(slots=True)
class TurnModel:
    """A turn's side of its model: which one, what its calls used, how much of the daily token
    budget was left when it began, and the outage it met, if any."""

    target: ModelTarget
    budget_left: int | None = None
    previous_outage: ModelOutage | None = None
    usage: TurnUsage = field(default_factory=TurnUsage)
    outage: ModelOutage | None = None

    def took(self, answer: ProviderRound) -> None:
        self.usage = self.usage.plus_call(self.target.config.label, answer.usage)

    @property
    def budget_spent(self) -> bool:
        """The daily budget ran out during this turn (or before it): no further model call."""
        return self.budget_left is not None and self.usage.budget_tokens >= self.budget_left

    def unavailable(self, failure: ModelUnavailable, now: datetime, backoff: OutageBackoff) -> str:
        """Record the outage (a successful call this turn resets the count) and say why."""
        previous = None if self.usage.model_calls else self.previous_outage
        self.outage = next_outage(
            previous, provider=failure.provider, status=failure.status, now=now, backoff=backoff
        )
        return f"model unavailable: {failure}"[:2000]
