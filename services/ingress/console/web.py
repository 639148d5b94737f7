"""What every console route shares: the Console object (templates, session keys, live feed,
static files), the signed-in check, CSRF-checked form reading, HTML answers and the security
headers every /ui answer carries."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, quote

import jinja2
from fastapi import Depends, Request, Response
from fastapi.responses import HTMLResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.ingress.auth import AGENT_ID_RE
from services.ingress.console.guard import SignInGuard
from services.ingress.console.live import EventFeed
from services.ingress.console.session import (
    CSRF_FIELD,
    SESSION_COOKIE,
    ConsoleKeys,
    Session,
)
from services.ingress.deps import Ingress
from shared.domain.capability import agent_of_token, hash_token, same_hash
from shared.domain.stored import AgentRecord

HERE = Path(__file__).parent
UI = "/ui"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""No inline script or style anywhere: whatever an agent wrote can only ever be text."""
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
STATIC_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}


def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every {{ }} is escaped; nothing in the templates is marked safe
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    return env


def _when(value: Any) -> str:
    """RFC 3339 times shortened for reading: `2026-11-27 03:04:05Z`."""
    text = str(value or "")
    return text.replace("T", " ").split(".")[0].removesuffix("+00:00").removesuffix("Z") + (
        "Z" if text else ""
    )


def static_files() -> dict[str, tuple[bytes, str]]:
    return {
        path.name: (path.read_bytes(), STATIC_TYPES[path.suffix])
        for path in (HERE / "static").iterdir()
        if path.suffix in STATIC_TYPES
    }


@dataclass
class Console:
    keys: ConsoleKeys
    feed: EventFeed
    guard: SignInGuard
    secure_cookies: bool = False
    """Cookies are Secure on every answer, not only over https: a deployment whose public URL
    is https sits behind a proxy that may speak plain HTTP to ingress."""
    env: jinja2.Environment = field(default_factory=templates)
    static: dict[str, tuple[bytes, str]] = field(default_factory=static_files)
    wall_clock: Callable[[], float] = time.time

    def page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(name).render(ui=UI, **context)
        return HTMLResponse(html, status_code=status)


class SignInRequired(Exception):
    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class Refused(Exception):
    """A console request refused: shown as an HTML page with the status and why."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(f"{status} {title}: {message}")
        self.status = status
        self.title = title
        self.message = message


def get_console(request: Request) -> Console:
    console = request.app.state.console
    assert isinstance(console, Console)
    return console


ConsoleDep = Annotated[Console, Depends(get_console)]


async def is_agent_token(ingress: Ingress, token: str) -> bool:
    owner = agent_of_token(token)
    if owner is None or not AGENT_ID_RE.match(owner):
        return False
    record = await ingress.reads.agent_record(owner)
    return record is not None and same_hash(hash_token(token), record.agent_token_hash)


def is_operator_token(ingress: Ingress, token: str) -> bool:
    return same_hash(hash_token(token), ingress.operator_token_hash)


async def agent_or_404(ingress: Ingress, agent_id: str) -> AgentRecord:
    record = await ingress.reads.agent_record(agent_id) if AGENT_ID_RE.match(agent_id) else None
    if record is None:
        raise Refused(404, "no such agent", f"there is no agent {agent_id!r}")
    return record


AGENT_TOKEN_REFUSED = "agent tokens never open the console; sign in with the operator token"  # noqa: S105 - a message


async def signed_in(request: Request) -> Session:
    """The operator's session, or SignInRequired; an agent's bearer token is refused outright."""
    console: Console = get_console(request)
    ingress: Ingress = request.app.state.ingress
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    bearer = scheme.lower() == "bearer" and token and not is_operator_token(ingress, token)
    if bearer and await is_agent_token(ingress, token):
        raise Refused(403, "forbidden", AGENT_TOKEN_REFUSED)
    session = console.keys.session(request.cookies.get(SESSION_COOKIE), console.wall_clock())
    if session is None or await console.guard.revoked(session.nonce):
        raise SignInRequired(request.url.path)
    return session


SessionDep = Annotated[Session, Depends(signed_in)]


async def read_form(request: Request) -> dict[str, str]:
    """An urlencoded form body as a dict (the last value of a repeated field wins)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "application/x-www-form-urlencoded":
        raise Refused(415, "unsupported form", "send the form as application/x-www-form-urlencoded")
    try:
        fields = parse_qs((await request.body()).decode(), keep_blank_values=True)
    except UnicodeDecodeError:
        raise Refused(400, "bad form", "the form is not UTF-8") from None
    return {key: values[-1] for key, values in fields.items()}


async def checked_form(request: Request, session: Session) -> dict[str, str]:
    """The form, after its CSRF token is checked against the session (403 otherwise)."""
    console = get_console(request)
    form = await read_form(request)
    if not console.keys.csrf_ok(session.nonce, form.get(CSRF_FIELD)):
        raise Refused(403, "forbidden", "the form's CSRF token is missing or wrong; reload it")
    return form


def login_redirect(next_path: str) -> Response:
    safe = next_path if next_path.startswith(UI) else UI
    return Response(status_code=303, headers={"location": f"{UI}/login?next={quote(safe)}"})


def see_other(path: str) -> Response:
    return Response(status_code=303, headers={"location": path})


class SecurityHeaders:
    """Adds the CSP and its companions to every answer under /ui (plain ASGI: streams pass)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not str(scope.get("path", "")).startswith(UI):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)
