"""Refusal of literal credentials in an agent spec: the spec names variables, never holds values.

Two checks. Field names a user reaches for when pasting a credential (`headers`, `env`,
`api_key`, `token`, ...) are refused by name with what to write instead, before the generic
unknown-field error could hide why. Values shaped like well-known credentials (bearer headers,
provider API keys, cloud access keys, private keys, secrets in a URL's query) are refused
wherever free text is stored, naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from pydantic_core import PydanticCustomError

LITERAL_CREDENTIAL_ERROR = "literal_secret"
"""The error type of a refused secret field; its context's `field` completes the error's path."""

_ENV_HINT = "name an environment variable of the executor instead"
_SECRET_FIELDS: dict[str, str] = {
    "headers": "`headers` would store literal header values (such as Authorization); "
    "use headers_from_env {header: ENV_NAME}",
    "env": "`env` would store literal values; use env_from_env {VAR: ENV_NAME}",
    "authorization": "`authorization` would store a literal credential; "
    "use headers_from_env {Authorization: ENV_NAME}",
}
_CREDENTIAL_WORDS = frozenset(
    {
        "apikey",
        "token",
        "accesstoken",
        "authtoken",
        "bearertoken",
        "password",
        "secret",
        "clientsecret",
        "credentials",
        "cookie",
        "xapikey",
        "privatekey",
    }
)
_CREDENTIAL_SHAPES = re.compile(
    r"\b(?:bearer|basic)\s+[A-Za-z0-9._~+/=-]{12,}"
    r"|\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{30,}"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bAIza[0-9A-Za-z_-]{35}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----",
    re.IGNORECASE,
)
_QUERY_SECRET_NAMES = frozenset(
    {"key", "apikey", "token", "accesstoken", "secret", "password", "sig", "signature"}
)


def _word(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def refuse_secret_fields(data: Any) -> None:
    """Raise a `literal_secret` error naming the first key of `data` that would hold a secret."""
    if not isinstance(data, dict):
        return
    for key in data:
        if not isinstance(key, str):
            continue
        hint = _SECRET_FIELDS.get(key.strip().lower())
        if hint is None and _word(key) in _CREDENTIAL_WORDS:
            hint = f"`{key}` would hold a credential; {_ENV_HINT}"
        if hint is not None:
            raise PydanticCustomError(
                LITERAL_CREDENTIAL_ERROR,
                "literal secrets are not stored: {hint}",
                {"field": key, "hint": hint},
            )


def refuse_literal_secret(text: str, field: str) -> None:
    """Raise ValueError if `text` (the value of `field`) looks like a pasted credential."""
    if _CREDENTIAL_SHAPES.search(text):
        raise ValueError(
            f"`{field}` looks like it holds a literal credential; "
            f"secrets are not stored, {_ENV_HINT}"
        )
    if field == "url":
        _refuse_query_secrets(text)


def _refuse_query_secrets(url: str) -> None:
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=False):
        compact = _word(name)
        named_secret = compact in _QUERY_SECRET_NAMES or compact.endswith(
            ("token", "secret", "apikey")
        )
        if named_secret and value:
            raise ValueError(
                f"`url` carries a credential in its query (`{name}`); "
                f"use headers_from_env, {_ENV_HINT}"
            )


def error_path(error: Mapping[str, Any]) -> tuple[str | int, ...]:
    """A validation error's path down to the offending field, the refused secret field included."""
    loc = tuple(error.get("loc", ()))
    context = error.get("ctx") or {}
    if error.get("type") == LITERAL_CREDENTIAL_ERROR and "field" in context:
        return (*loc, context["field"])
    return loc
