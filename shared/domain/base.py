"""Base model configuration and the small value types every record shares."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, AwareDatetime, BaseModel, ConfigDict, StringConstraints


def _to_utc(value: datetime) -> datetime:
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("instant is out of range once converted to UTC") from None


UtcDatetime = Annotated[AwareDatetime, AfterValidator(_to_utc)]
"""A timezone-aware instant, normalised to UTC so equal instants compare and encode equal."""

NonEmptyStr = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, pattern=r"\S")]
"""A string that is trimmed first; whitespace alone counts as empty. The pattern changes nothing
in validation (a trimmed, non-empty string has a non-space character) but tells the published
schemas so: a client generating requests from them would otherwise think "\f" valid."""


class Record(BaseModel):
    """A frozen value that rejects unknown fields at every depth."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_strip_whitespace=False)
