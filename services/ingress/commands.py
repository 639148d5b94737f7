"""Routes build ledger commands and read the ledger's reply through these two helpers, so a
malformed field is a 400 and a rejection keeps its kind and the contract's status."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import ValidationError

from services.ingress.deps import Ingress
from services.ingress.errors import INVALID_REQUEST, ApiError
from shared.domain.errors import HTTP_STATUS
from shared.wire.commands import Command

C = TypeVar("C", bound=Command)


def make(cls: type[C], **fields: Any) -> C:
    try:
        return cls(**fields)
    except ValidationError as exc:
        errors = [
            {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
            for e in exc.errors(include_url=False)
        ]
        raise ApiError(
            400, INVALID_REQUEST, "invalid request fields", details={"errors": errors}
        ) from None


async def send(ingress: Ingress, command: Command) -> dict[str, Any]:
    """The ledger's result; a rejection (first or replayed) becomes the matching ApiError."""
    reply = await ingress.client.send(command)
    if reply.error is not None:
        error = reply.error
        raise ApiError(
            HTTP_STATUS.get(error.kind, 400), error.kind.value, error.message, details=error.details
        )
    return dict(reply.result or {})
