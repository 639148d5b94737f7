"""Console sessions and CSRF tokens: signed by a key derived from the operator token, bound to
one session, refused when forged, expired or minted under another operator token."""

from __future__ import annotations

from services.ingress.console.session import SESSION_SECONDS, ConsoleKeys

NOW = 1_800_000_000.0


def test_a_fresh_session_is_accepted_until_it_expires() -> None:
    keys = ConsoleKeys("operator-token")
    cookie = keys.new_session(NOW)
    session = keys.session(cookie, NOW + 1)
    assert session is not None
    assert session.expires == int(NOW) + SESSION_SECONDS
    assert keys.session(cookie, NOW + SESSION_SECONDS) is None


def test_a_session_from_another_operator_token_is_refused() -> None:
    cookie = ConsoleKeys("old-token").new_session(NOW)
    assert ConsoleKeys("new-token").session(cookie, NOW) is None


def test_an_edited_session_is_refused() -> None:
    keys = ConsoleKeys("operator-token")
    version, expires, nonce, mac = keys.new_session(NOW).split(".")
    longer = f"{version}.{int(expires) + 10**6}.{nonce}.{mac}"
    for forged in (longer, f"{version}.{expires}.other.{mac}", "", "v1.x.y.z", "garbage"):
        assert keys.session(forged, NOW) is None, forged


def test_a_csrf_token_is_bound_to_its_session() -> None:
    keys = ConsoleKeys("operator-token")
    first = keys.session(keys.new_session(NOW), NOW)
    second = keys.session(keys.new_session(NOW), NOW)
    assert first is not None
    assert second is not None
    token = keys.csrf_for(first.nonce)
    assert keys.csrf_ok(first.nonce, token)
    assert not keys.csrf_ok(second.nonce, token)
    assert not keys.csrf_ok(first.nonce, None)
    assert not keys.csrf_ok(first.nonce, "")
    assert not keys.csrf_ok(None, token)
