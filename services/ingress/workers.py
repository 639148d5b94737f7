"""How the ingress process serves HTTP: its uvicorn options, and with several workers the
supervising process, which starts uvicorn's workers without importing the app itself.

Each worker is spawned, not forked, and imports and builds the app afresh; a supervisor that
built one first (imports alone cost about 1.5 s of CPU) doubled the time to the first worker
serving, past a minute on a loaded machine."""

from __future__ import annotations

import sys
from typing import Any

import uvicorn

from services.ingress.settings import IngressSettings, MisconfiguredError

FACTORY = "services.ingress.app:create_app"
SHUTDOWN_GRACE_S = 10
"""With several workers, how long a stopping worker waits for open responses (console streams
never finish by themselves) before it closes them."""


def serving(settings: IngressSettings) -> dict[str, Any]:
    """uvicorn's options for one server, whichever way it runs."""
    return {
        "loop": settings.http_loop,
        "http": settings.http_parser,
        "host": settings.http_host,
        "port": settings.http_port,
        "log_level": "warning",
        "access_log": False,
    }


def refuse_if_misconfigured(settings: IngressSettings) -> None:
    try:
        settings.required_operator_token()
    except MisconfiguredError as err:
        print(f"longrun ingress: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def serve_workers(settings: IngressSettings) -> None:
    """`ingress_workers` processes behind one port. Each worker's own uvicorn server stops it:
    open console streams are cut after the grace period."""
    refuse_if_misconfigured(settings)
    uvicorn.run(
        FACTORY,
        factory=True,
        workers=settings.ingress_workers,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        **serving(settings),
    )
