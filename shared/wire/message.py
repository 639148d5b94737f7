"""Base class of every message on a stream: a frozen model that names its type and version."""

from __future__ import annotations

from typing import ClassVar

from shared.domain.base import Record


class Message(Record):
    """A typed, versioned message. Add optional fields freely; a breaking change is a new type."""

    message_type: ClassVar[str]
    version: ClassVar[int] = 1
