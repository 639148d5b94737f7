"""Operator routes on presets: specs stored under a name for SpawnAgent's `preset`."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response
from pydantic import BaseModel, ConfigDict, Field

from services.ingress.auth import Operator
from services.ingress.deps import IngressDep
from services.ingress.errors import ApiError
from services.ingress.routes_agents import errors
from shared.domain.presets import PresetRecord
from shared.domain.specs import AgentSpec
from shared.store.presets import get_preset, list_presets, put_preset

router = APIRouter(prefix="/v1/presets", tags=["presets"])

PRESET_NOT_FOUND = "preset_not_found"

PresetNamePath = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", description="The preset's name.")
]


class PutPresetBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec: AgentSpec = Field(description="An agent spec, as PUT /v1/agents/{agent_id} takes.")


class PresetList(BaseModel):
    presets: list[PresetRecord]


@router.put(
    "/{name}",
    dependencies=[Operator],
    status_code=201,
    responses={200: {"model": PresetRecord}, **errors()},
)
async def put(
    name: PresetNamePath, body: PutPresetBody, ingress: IngressDep, response: Response
) -> PresetRecord:
    """Store the spec under the name: 201 for a new preset, 200 for an existing one (its
    version moves only when the spec changed)."""
    client = ingress.client
    done = await put_preset(client.redis, client.names, name, body.spec, ingress.clock())
    if not done.created:
        response.status_code = 200
    return done.record


@router.get("", dependencies=[Operator], responses=errors())
async def list_all(ingress: IngressDep) -> PresetList:
    return PresetList(presets=await list_presets(ingress.client.redis, ingress.client.names))


@router.get("/{name}", dependencies=[Operator], responses=errors(404))
async def get(name: PresetNamePath, ingress: IngressDep) -> PresetRecord:
    found = await get_preset(ingress.client.redis, ingress.client.names, name)
    if found is None:
        raise ApiError(404, PRESET_NOT_FOUND, f"no preset {name!r} (PUT /v1/presets/{name})")
    return found
