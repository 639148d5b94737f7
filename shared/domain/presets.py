"""Presets: agent specs the operator stores under a name, for SpawnAgent's `preset`. A preset is
operator configuration, not an agent's record: SpawnAgent copies its spec into the child when
the child is created, so a later change of the preset leaves existing children as they are."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from shared.domain.base import Record, UtcDatetime
from shared.domain.specs import AgentSpec

PresetName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]


class PresetRecord(Record):
    """`version` starts at 1 and moves only when the stored spec changes."""

    name: PresetName
    spec: AgentSpec
    version: Annotated[int, Field(ge=1)]
    updated_at: UtcDatetime
