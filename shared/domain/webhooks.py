"""Where an agent's webhook check may point (LONGRUN_WEBHOOK_ALLOW), which addresses a webhook
call may reach, and the id a webhook secret is known by: pure, shared by the ledger (a check
refused when it is set) and the scheduler (a call refused when its host resolves).

The allow list is a comma list of `host`, `host:port`, an IP address (`10.0.0.5`, `[::1]:8443`)
or a CIDR (`10.1.0.0/16`). A URL matches an entry naming its host (or, for an address or CIDR,
containing its IP literal) and, when the entry has a port, that port. A name allows only the
public addresses it resolves to: a loopback, private, link-local or otherwise non-global address
must itself be allowed by an address or CIDR entry, so an allowed name that resolves (or is made
to resolve) to 169.254.169.254 or 10.0.0.1 reaches nothing. Operator-set checks are not limited.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
DEFAULT_PORTS = {"http": 80, "https": 443}
SECRET_ID_HEX = 16
HOST_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?")


class AllowListError(ValueError):
    """LONGRUN_WEBHOOK_ALLOW holds an entry that is not a host, host:port, address or CIDR."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a webhook URL points: scheme, host (lowercase, no brackets) and port."""

    scheme: str
    host: str
    port: int

    @property
    def ip(self) -> IPAddress | None:
        return _ip(self.host)


@dataclass(frozen=True, slots=True)
class AllowEntry:
    host: str | None = None
    network: IPNetwork | None = None
    port: int | None = None

    def matches(self, target: Target) -> bool:
        if self.port is not None and self.port != target.port:
            return False
        if self.network is not None:
            ip = target.ip
            return ip is not None and _unmapped(ip) in self.network
        return self.host == target.host

    def contains(self, address: IPAddress, port: int) -> bool:
        return (
            self.network is not None
            and (self.port is None or self.port == port)
            and _unmapped(address) in self.network
        )


@dataclass(frozen=True, slots=True)
class WebhookAllow:
    entries: tuple[AllowEntry, ...] = ()

    @classmethod
    def parse(cls, text: str) -> WebhookAllow:
        return cls(tuple(_entry(part.strip()) for part in text.split(",") if part.strip()))

    def allows_url(self, url: str) -> bool:
        """The URL's host (and port) is on the list."""
        target = target_of(url)
        return target is not None and any(e.matches(target) for e in self.entries)

    def refusal(self, url: str, addresses: list[IPAddress]) -> str | None:
        """Why a call of an agent-set check to `url`, whose host resolved to `addresses`, may
        not be made (None: it may)."""
        target = target_of(url)
        if target is None or not any(e.matches(target) for e in self.entries):
            return f"{url} is not in LONGRUN_WEBHOOK_ALLOW"
        if not addresses:
            return f"{target.host} resolves to no address"
        for address in addresses:
            if is_public(address):
                continue
            if not any(e.contains(address, target.port) for e in self.entries):
                return (
                    f"{target.host} resolves to {address} ({address_kind(address)}), which "
                    "LONGRUN_WEBHOOK_ALLOW does not name as an address or CIDR"
                )
        return None


def target_of(url: str) -> Target | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = (parts.hostname or "").lower()
    if parts.scheme not in DEFAULT_PORTS or not host:
        return None
    return Target(parts.scheme, host, port or DEFAULT_PORTS[parts.scheme])


def is_public(address: IPAddress) -> bool:
    """A globally routable unicast address: not loopback, private, link-local, shared (CGNAT),
    reserved, unspecified or multicast (an IPv4-mapped IPv6 address is judged as IPv4)."""
    address = _unmapped(address)
    return address.is_global and not address.is_multicast


def address_kind(address: IPAddress) -> str:
    address = _unmapped(address)
    for kind in ("loopback", "link_local", "private", "multicast", "unspecified", "reserved"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    return "not global"


def secret_id(secret: str) -> str:
    """What a webhook secret is known by in logs and `longrun up`'s output: never the secret."""
    digest = hashlib.sha256(b"longrun-webhook-secret\n" + secret.encode()).hexdigest()
    return digest[:SECRET_ID_HEX]


def _unmapped(address: IPAddress) -> IPAddress:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None


def _entry(text: str) -> AllowEntry:
    bare = _ip(text) if ":" in text and not text.startswith("[") else None
    if bare is not None:  # an IPv6 address without brackets takes no port
        return AllowEntry(network=ipaddress.ip_network(_unmapped(bare)))
    if "/" in text:
        try:
            return AllowEntry(network=ipaddress.ip_network(text.lower(), strict=False))
        except ValueError:
            raise AllowListError(f"{text!r} is not a CIDR such as 10.1.0.0/16") from None
    target = target_of(f"http://{text}")
    if target is None or "@" in text or "/" in text or "?" in text or "#" in text:
        raise AllowListError(f"{text!r} is not a host, host:port, address or CIDR")
    port = target.port if _has_port(text) else None
    ip = target.ip
    if ip is not None:
        return AllowEntry(network=ipaddress.ip_network(_unmapped(ip)), port=port)
    if not HOST_NAME.fullmatch(target.host):
        raise AllowListError(f"{text!r} is not a host, host:port, address or CIDR")
    return AllowEntry(host=target.host, port=port)


def _has_port(text: str) -> bool:
    if text.startswith("["):
        return "]:" in text
    return text.count(":") == 1
