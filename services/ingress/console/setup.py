"""Mounting the console on the ingress app: its routers, its HTML error pages, its security
headers, and the live feed's readers stopped with the app."""

from __future__ import annotations

from fastapi import FastAPI, Request, Response

from services.ingress.console import actions, events, pages, signin, work_page
from services.ingress.console.guard import SignInGuard
from services.ingress.console.live import EventFeed
from services.ingress.console.session import ConsoleKeys
from services.ingress.console.web import (
    Console,
    Refused,
    SecurityHeaders,
    SignInRequired,
    get_console,
    login_redirect,
)
from shared.store.client import AnyRedis
from shared.wire.names import Names


def build_console(
    redis: AnyRedis, names: Names, operator_token: str, *, public_url: str | None = None
) -> Console:
    """`redis` should be the console's own client: its readers hold a connection each while
    they block in XREAD. A public URL that is https makes every cookie Secure."""
    return Console(
        keys=ConsoleKeys(operator_token),
        feed=EventFeed(redis, names),
        guard=SignInGuard(redis, names),
        secure_cookies=(public_url or "").lower().startswith("https://"),
    )


async def _on_sign_in(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    return login_redirect(exc.next_path)


async def _on_refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Refused)
    console = get_console(request)
    return console.page("error.html", status=exc.status, title=exc.title, message=exc.message)


def install_console(app: FastAPI, console: Console) -> None:
    app.state.console = console
    for module in (signin, pages, work_page, events, actions):
        app.include_router(module.router)
    app.add_exception_handler(SignInRequired, _on_sign_in)
    app.add_exception_handler(Refused, _on_refused)
    app.add_middleware(SecurityHeaders)
