"""Signing in to the console with the operator token, and out again.

The sign-in form is CSRF-protected too, by a pre-session nonce cookie; a correct operator token
gets a signed session cookie (HttpOnly, SameSite=Strict, Secure over HTTPS or whenever the public
URL is https). An agent's token is refused with 403: agent tokens never open the console. After
five failed sign-ins in a minute an address gets 429 for the rest of that minute, whatever token
it sends; signing out revokes the session on the server, not only in the browser.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse

from services.ingress.console.session import (
    CSRF_FIELD,
    LOGIN_COOKIE,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Session,
    new_login_nonce,
)
from services.ingress.console.web import (
    AGENT_TOKEN_REFUSED,
    UI,
    Console,
    ConsoleDep,
    SessionDep,
    checked_form,
    is_agent_token,
    is_operator_token,
    read_form,
    see_other,
)
from services.ingress.deps import IngressDep

router = APIRouter(prefix=UI, include_in_schema=False)
LOGIN_SECONDS = 3600


def _safe_next(value: str | None) -> str:
    """Only a console path: never another site (`//host`) or another scheme."""
    if value and value.startswith(UI) and not value.startswith("//") and "\\" not in value:
        return value
    return UI


def _secure(console: Console, request: Request) -> bool:
    return console.secure_cookies or request.url.scheme == "https"


def _cookie(
    response: Response, console: Console, request: Request, name: str, value: str, *, max_age: int
) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=UI,
        httponly=True,
        samesite="strict",
        secure=_secure(console, request),
    )


def _forget(response: Response, console: Console, request: Request, name: str) -> None:
    response.delete_cookie(
        name, path=UI, httponly=True, samesite="strict", secure=_secure(console, request)
    )


def _address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _login_page(
    console: Console, request: Request, next_path: str, error: str | None, status: int
) -> HTMLResponse:
    nonce = new_login_nonce()
    response = console.page(
        "login.html",
        status=status,
        csrf_field=CSRF_FIELD,
        csrf=console.keys.csrf_for(f"login:{nonce}"),
        next_path=next_path,
        error=error,
    )
    _cookie(response, console, request, LOGIN_COOKIE, nonce, max_age=LOGIN_SECONDS)
    return response


@router.get("/login", response_class=HTMLResponse)
async def login_form(
    request: Request, console: ConsoleDep, next: Annotated[str | None, Query()] = None
) -> HTMLResponse:
    return _login_page(console, request, _safe_next(next), None, 200)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request, console: ConsoleDep, ingress: IngressDep) -> Response:
    form = await read_form(request)
    next_path = _safe_next(form.get("next"))
    nonce = request.cookies.get(LOGIN_COOKIE)
    if not nonce or not console.keys.csrf_ok(f"login:{nonce}", form.get(CSRF_FIELD)):
        message = "the sign-in form expired or lacks its CSRF token; sign in again"
        return _login_page(console, request, next_path, message, 403)
    address = _address(request)
    wait = await console.guard.reserve(address)
    if wait:
        message = "too many failed sign-ins from this address; wait a minute and try again"
        throttled = _login_page(console, request, next_path, message, 429)
        throttled.headers["retry-after"] = str(wait)
        return throttled
    token = form.get("token", "").strip()
    if token and is_operator_token(ingress, token):
        await console.guard.succeeded(address)
        response = see_other(next_path)
        session = console.keys.new_session(console.wall_clock())
        _cookie(response, console, request, SESSION_COOKIE, session, max_age=SESSION_SECONDS)
        _forget(response, console, request, LOGIN_COOKIE)
        return response
    if token and await is_agent_token(ingress, token):
        return _login_page(console, request, next_path, AGENT_TOKEN_REFUSED, 403)
    return _login_page(console, request, next_path, "unknown token", 401)


@router.post("/logout")
async def logout(request: Request, console: ConsoleDep, session: SessionDep) -> Response:
    await checked_form(request, session)
    await _revoke(console, session)
    response = see_other(f"{UI}/login")
    _forget(response, console, request, SESSION_COOKIE)
    return response


async def _revoke(console: Console, session: Session) -> None:
    await console.guard.revoke(session.nonce, session.expires - int(console.wall_clock()))
