"""Webhook safety, the pure part: which URLs LONGRUN_WEBHOOK_ALLOW lets an agent's check point
to, which resolved addresses a call may reach (a name allows public addresses only; loopback,
private and link-local ones must be allowed as addresses), bad allow lists refused at start,
and the ledger refusing an agent's check with `webhook_not_allowed` when it is set."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from pydantic import ValidationError

from services.ledger.rules import Context, LedgerState, decide
from shared.domain.acceptance import SetBy, WebhookCheck
from shared.domain.errors import HTTP_STATUS, DomainError, ErrorKind
from shared.domain.webhooks import AllowListError, WebhookAllow, is_public, secret_id
from shared.settings import CommonSettings
from shared.wire import commands as c
from tests.builders import at, make_plan_artifact, make_work_item
from tests.builders import work_item_id as wid
from tests.unit.test_ledger_rules_acceptance import state_with, tool

ALLOW = WebhookAllow.parse("hooks.example.com, ci.example.com:8443, 127.0.0.1, 10.9.0.0/16")
WI = wid(1)


def ip(text: str) -> Any:
    return ipaddress.ip_address(text)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://hooks.example.com/check", True),
        ("http://HOOKS.example.com:8080/x", True),  # a bare host allows any port
        ("https://ci.example.com:8443/x", True),
        ("https://ci.example.com/x", False),  # ci is allowed on 8443 only
        ("http://127.0.0.1:5000/x", True),
        ("http://10.9.3.4/x", True),
        ("http://10.0.0.1/x", False),
        ("http://169.254.169.254/latest/meta-data", False),
        ("http://localhost:5000/x", False),
        ("http://hooks.example.com.evil.test/x", False),
        ("http://evil.test/?hooks.example.com", False),
        ("http://hooks.example.com@evil.test/", False),
        ("ftp://hooks.example.com/", False),
        ("not a url", False),
    ],
)
def test_only_listed_hosts_ports_and_networks_match(url: str, allowed: bool) -> None:
    assert ALLOW.allows_url(url) is allowed


def test_an_empty_list_allows_no_agent_webhook() -> None:
    assert not WebhookAllow.parse("").allows_url("https://hooks.example.com/")


def test_a_name_reaches_public_addresses_only() -> None:
    url = "https://hooks.example.com/check"
    assert ALLOW.refusal(url, [ip("93.184.216.34")]) is None
    for inside in ("127.0.0.2", "10.0.0.1", "169.254.169.254", "192.168.1.1", "::1", "fd00::1"):
        why = ALLOW.refusal(url, [ip("93.184.216.34"), ip(inside)])
        assert why is not None
        assert inside in why
    assert "link-local" in str(ALLOW.refusal(url, [ip("169.254.169.254")]))
    assert ALLOW.refusal(url, []) == "hooks.example.com resolves to no address"


def test_an_address_allowed_as_an_address_is_reachable() -> None:
    assert ALLOW.refusal("http://127.0.0.1:5000/x", [ip("127.0.0.1")]) is None
    assert ALLOW.refusal("http://10.9.0.7/x", [ip("10.9.0.7")]) is None
    # The list changed since the check was set: the call is refused too.
    assert ALLOW.refusal("http://10.0.0.1/x", [ip("10.0.0.1")]) is not None


def test_ipv4_mapped_addresses_are_judged_as_ipv4() -> None:
    assert not is_public(ip("::ffff:169.254.169.254"))
    assert not is_public(ip("::ffff:10.0.0.1"))
    assert is_public(ip("::ffff:93.184.216.34"))
    assert not is_public(ip("100.64.0.1"))  # shared address space (CGNAT)
    assert not is_public(ip("0.0.0.0"))  # noqa: S104 - an address under test, not a bind


@pytest.mark.parametrize("bad", ["http://x", "10.0.0.0/33", "a b", "host:port", "x/y", "u@h"])
def test_a_malformed_allow_list_is_refused_at_start(bad: str) -> None:
    with pytest.raises(AllowListError):
        WebhookAllow.parse(bad)
    with pytest.raises(ValidationError, match="webhook_allow"):
        CommonSettings(webhook_allow=f"hooks.example.com,{bad}")


def test_ipv6_entries_with_and_without_a_port() -> None:
    allow = WebhookAllow.parse("::1, [fd00::5]:9000")
    assert allow.allows_url("http://[::1]:8080/x")
    assert allow.allows_url("http://[fd00::5]:9000/x")
    assert not allow.allows_url("http://[fd00::5]:9001/x")


def test_the_secret_id_names_the_secret_without_showing_it() -> None:
    assert secret_id("s3cret") == secret_id("s3cret")
    assert secret_id("s3cret") != secret_id("other")
    assert len(secret_id("s3cret")) == 16
    assert "s3cret" not in secret_id("s3cret")


# ---------------------------------------------------------------- the ledger, when a check is set


def run(state: LedgerState, cmd: Any) -> Any:
    context = Context(now=at(minutes=5), new_id=lambda p: p + "X", webhook_allow=ALLOW)
    return decide(state, cmd, context)


def create(url: str, *, by_operator: bool = False) -> Any:
    args = {"objective": "ship", "acceptance": [{"kind": "webhook", "url": url}]}
    common = {"work_item_id": WI, "plan_artifact": make_plan_artifact(item_id=WI)}
    return tool(c.CreateWorkItem, args, by_operator=by_operator, **common)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.2:9/x", "http://169.254.169.254/latest/meta-data", "http://10.0.0.1/"],
)
def test_an_agents_webhook_off_the_list_is_refused_when_set(url: str) -> None:
    state = state_with(make_work_item(id=wid(9)))
    with pytest.raises(DomainError) as refused:
        run(state, create(url))
    assert refused.value.kind is ErrorKind.WEBHOOK_NOT_ALLOWED
    assert HTTP_STATUS[refused.value.kind] == 400
    assert refused.value.details == {"url": url}


def test_the_operator_may_set_any_webhook_and_the_agent_a_listed_one() -> None:
    state = state_with(make_work_item(id=wid(9)))
    made = run(state, create("http://169.254.169.254/x", by_operator=True))
    assert made.state.items[WI].acceptance[0].set_by is SetBy.OPERATOR
    listed = run(state, create("https://hooks.example.com/check"))
    assert listed.state.items[WI].acceptance[0].set_by is SetBy.AGENT


def test_an_update_adding_an_unlisted_webhook_is_refused_keeping_the_operators() -> None:
    operator_hook = WebhookCheck(url="http://10.0.0.1/op", set_by=SetBy.OPERATOR)
    state = state_with(make_work_item(id=WI, acceptance=(operator_hook,)))
    kept = {"kind": "webhook", "url": operator_hook.url, "timeout_s": operator_hook.timeout_s}
    assert run(state, tool(c.UpdateWorkItem, {"work_item_id": WI, "acceptance": [kept]}))
    added = [kept, {"kind": "webhook", "url": "http://10.0.0.2/mine"}]
    with pytest.raises(DomainError) as refused:
        run(state, tool(c.UpdateWorkItem, {"work_item_id": WI, "acceptance": added}))
    assert refused.value.kind is ErrorKind.WEBHOOK_NOT_ALLOWED
