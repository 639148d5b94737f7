"""The console's actions, each a real HTML form (CSRF-checked, working without JavaScript) that
sends the same ledger command as its HTTP route: send a message, cancel a WorkItem, put the
current one down, approve or reject a verifying one, pause, resume or retire the agent, and
create or update agents from a YAML agents file (what `longrun apply` sends)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse

from services.ingress.console.session import CSRF_FIELD, Session
from services.ingress.console.web import (
    UI,
    ConsoleDep,
    Refused,
    SessionDep,
    agent_or_404,
    checked_form,
    see_other,
)
from services.ingress.deps import Ingress, IngressDep
from services.ingress.errors import ApiError
from services.ingress.operator_actions import (
    cancel_work_item,
    ensure_agent,
    pause_agent,
    put_down_work_item,
    record_operator_verdict,
    resume_agent,
    retire_agent,
    send_operator_message,
)
from shared.agents_file import AgentsFileError, Entry, PresetEntry, parse_agents_file
from shared.domain.specs import AgentSpec, changed_fields
from shared.store.presets import put_preset

router = APIRouter(prefix=UI, include_in_schema=False)
AGENTS_FILE_NAME = "agents.yaml"
"""How the pasted file is named in error messages (`agents.yaml:LINE: ...`)."""


def refused(err: ApiError) -> Refused:
    return Refused(err.status, err.kind, err.message)


@router.post("/agents/{agent_id}/messages")
async def send_message(
    agent_id: str, request: Request, ingress: IngressDep, session: SessionDep
) -> Response:
    form = await checked_form(request, session)
    await agent_or_404(ingress, agent_id)
    text = form.get("text", "").strip()
    if not text:
        raise Refused(400, "invalid_request", "the message is empty")
    try:
        await send_operator_message(
            ingress,
            agent_id,
            text,
            form.get("work_item_id") or None,
            _retry_key(form),
        )
    except ApiError as err:
        raise refused(err) from None
    return see_other(f"{UI}/agents/{agent_id}?notice=message_sent")


@dataclass(frozen=True, slots=True)
class Applied:
    agent_id: str
    line: str
    agent_token: str | None = None


async def _plan(ingress: Ingress, located: list[tuple[int, Entry]]) -> list[str]:
    """Refuse the whole file on a loop change before anything is written (as apply does)."""
    actions = []
    for line, entry in located:
        if isinstance(entry, PresetEntry):
            actions.append("preset")
            continue
        record = await ingress.reads.agent_record(entry.id)
        if record is None:
            actions.append("created")
            continue
        loop = record.state.loop
        if entry.loop is not None and entry.loop is not loop:
            raise AgentsFileError(
                f"{AGENTS_FILE_NAME}:{line}: agent {entry.id!r} runs the {loop.value} loop; "
                "an agent's loop never changes after creation"
            )
        actions.append("existing")
    return actions


async def _apply_preset(ingress: Ingress, entry: PresetEntry) -> Applied:
    client = ingress.client
    done = await put_preset(client.redis, client.names, entry.name, entry.spec, ingress.clock())
    action = "created" if done.created else "updated" if done.changed else "unchanged"
    return Applied(entry.name, f"{action} preset {entry.name}")


async def _apply_one(ingress: Ingress, entry: Entry, action: str) -> Applied:
    if isinstance(entry, PresetEntry):
        return await _apply_preset(ingress, entry)
    if action == "existing" and entry.spec is None:
        return Applied(entry.id, f"unchanged {entry.id}")
    before = (await ingress.reads.agent_spec(entry.id)).spec if action == "existing" else None
    ensured = await ensure_agent(ingress, entry.id, entry.loop, entry.spec)
    if ensured.created:
        return Applied(entry.id, f"created {entry.id}", ensured.agent_token)
    changed = changed_fields(before or AgentSpec(), entry.spec or AgentSpec())
    if not changed:
        return Applied(entry.id, f"unchanged {entry.id}")
    return Applied(entry.id, f"updated {entry.id} ({', '.join(changed)})")


@router.post("/agents", response_class=HTMLResponse)
async def apply_agents(
    request: Request, ingress: IngressDep, console: ConsoleDep, session: SessionDep
) -> HTMLResponse:
    form = await checked_form(request, session)
    text = form.get("yaml", "")
    try:
        located = parse_agents_file(AGENTS_FILE_NAME, text)
        actions = await _plan(ingress, located)
    except AgentsFileError as err:
        raise Refused(400, "invalid agents file", str(err)) from None
    try:
        applied = [
            await _apply_one(ingress, entry, action)
            for (_, entry), action in zip(located, actions, strict=True)
        ]
    except ApiError as err:
        raise refused(err) from None
    return console.page(
        "applied.html",
        applied=applied,
        csrf_field=CSRF_FIELD,
        csrf=console.keys.csrf_for(session.nonce),
    )


ReasonedAction = Callable[[Ingress, str, str, str, str | None], Awaitable[dict[str, Any]]]
"""An operator action on one WorkItem with a reason: (ingress, agent, item, reason, retry key)."""


@dataclass(frozen=True, slots=True)
class ItemForm:
    """A form posted about one WorkItem, by a signed-in operator."""

    ingress: Ingress
    request: Request
    session: Session
    agent_id: str
    work_item_id: str


async def _with_reason(action: ReasonedAction, notice: str, posted: ItemForm) -> Response:
    """Check the form, send the action with the form's reason, and go back to the item's card."""
    ingress, agent_id, work_item_id = posted.ingress, posted.agent_id, posted.work_item_id
    form = await checked_form(posted.request, posted.session)
    await agent_or_404(ingress, agent_id)
    reason = form.get("reason", "").strip()
    if not reason:
        raise Refused(400, "invalid_request", "say why, in the reason field")
    try:
        await action(ingress, agent_id, work_item_id, reason, _retry_key(form))
    except ApiError as err:
        raise refused(err) from None
    return see_other(f"{UI}/agents/{agent_id}?notice={notice}#{work_item_id}")


@router.post("/agents/{agent_id}/work-items/{work_item_id}/cancel")
async def cancel(
    agent_id: str, work_item_id: str, request: Request, ingress: IngressDep, session: SessionDep
) -> Response:
    posted = ItemForm(ingress, request, session, agent_id, work_item_id)
    return await _with_reason(cancel_work_item, "cancelled", posted)


@router.post("/agents/{agent_id}/work-items/{work_item_id}/put-down")
async def put_down(
    agent_id: str, work_item_id: str, request: Request, ingress: IngressDep, session: SessionDep
) -> Response:
    posted = ItemForm(ingress, request, session, agent_id, work_item_id)
    return await _with_reason(put_down_work_item, "put_down", posted)


@router.post("/agents/{agent_id}/work-items/{work_item_id}/verdict")
async def verdict(
    agent_id: str, work_item_id: str, request: Request, ingress: IngressDep, session: SessionDep
) -> Response:
    form = await checked_form(request, session)
    await agent_or_404(ingress, agent_id)
    passed = {"true": True, "false": False}.get(form.get("passed", ""))
    attempt = form.get("attempt", "")
    if passed is None or (attempt and not attempt.isdigit()):
        raise Refused(400, "invalid_request", "a verdict is Approve or Reject of one attempt")
    try:
        await record_operator_verdict(
            ingress,
            agent_id,
            work_item_id,
            passed=passed,
            note=form.get("note", "").strip(),
            attempt=int(attempt) if attempt else None,
            idempotency_key=_retry_key(form),
        )
    except ApiError as err:
        raise refused(err) from None
    notice = "approved" if passed else "rejected"
    return see_other(f"{UI}/agents/{agent_id}?notice={notice}#{work_item_id}")


def _retry_key(form: dict[str, str]) -> str | None:
    """The rendered form's own key: submitting the same form twice applies it once."""
    key = form.get("key", "")
    return f"console:{key}" if key else None


async def _control(
    request: Request, ingress: Ingress, session: Session, agent_id: str, notice: str
) -> Response:
    """Pause, resume or retire from the agent page's Control card; back to the agent."""
    form = await checked_form(request, session)
    await agent_or_404(ingress, agent_id)
    reason = form.get("reason", "").strip()
    if notice != "resumed" and not reason:
        raise Refused(400, "invalid_request", "say why, in the reason field")
    try:
        if notice == "paused":
            interrupt = form.get("interrupt") == "true"
            await pause_agent(ingress, agent_id, reason, interrupt=interrupt)
        elif notice == "resumed":
            await resume_agent(ingress, agent_id)
        else:
            await retire_agent(ingress, agent_id, reason)
    except ApiError as err:
        raise refused(err) from None
    return see_other(f"{UI}/agents/{agent_id}?notice={notice}#control")


@router.post("/agents/{agent_id}/pause")
async def pause(
    agent_id: str, request: Request, ingress: IngressDep, session: SessionDep
) -> Response:
    return await _control(request, ingress, session, agent_id, "paused")


@router.post("/agents/{agent_id}/resume")
async def resume(
    agent_id: str, request: Request, ingress: IngressDep, session: SessionDep
) -> Response:
    return await _control(request, ingress, session, agent_id, "resumed")


@router.post("/agents/{agent_id}/retire")
async def retire(
    agent_id: str, request: Request, ingress: IngressDep, session: SessionDep
) -> Response:
    return await _control(request, ingress, session, agent_id, "retired")
