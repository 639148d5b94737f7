"""Mapping what an HTTP model SDK raised onto a `ModelFailure`: the same rule for every provider
(the OpenAI and Anthropic SDKs share the shape of their errors)."""

from __future__ import annotations

from typing import Any

from services.turn_executor.providers import ModelFailure
from shared.domain.model_failures import is_transient_status


def _headers(exc: Any) -> dict[str, str]:
    response = getattr(exc, "response", None)
    raw = getattr(response, "headers", None) or {}
    return {str(k).lower(): str(v) for k, v in raw.items()}


def status_failure(exc: Any) -> ModelFailure:
    """An HTTP error answer: transient for 429, 408 and 5xx, with the provider's message."""
    status = int(exc.status_code)
    return ModelFailure(
        f"the model endpoint answered {status}: {exc.message}",
        transient=is_transient_status(status),
        status=status,
        headers=_headers(exc),
    )


def timeout_failure(timeout_s: float) -> ModelFailure:
    return ModelFailure(f"the model endpoint did not answer within {timeout_s:g}s", transient=True)


def connection_failure(exc: Any) -> ModelFailure:
    """Refused, reset or dropped connections: the endpoint may be back shortly."""
    message = getattr(exc, "message", None) or str(exc)
    return ModelFailure(f"the model endpoint is unreachable: {message}", transient=True)
