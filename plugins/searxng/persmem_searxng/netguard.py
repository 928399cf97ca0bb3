"""SSRF rules for web_fetch (security.md): http/https only; the host is resolved and every address must be
public (or in [searxng] fetch_allow_networks); the connection goes to the checked address, so a DNS answer
cannot change between check and use; redirects are followed by hand and each hop is checked again.

Numeric tricks (`127.1`, `2130706433`, `0x7f.1`, `[::ffff:127.0.0.1]`) resolve to the address they mean
and are judged by it."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass

import httpx2

from persmem_core import UserError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass(frozen=True)
class Target:
    url: httpx2.URL  # what the caller asked for
    address: Address  # the checked address the connection will use

    def pinned(self) -> tuple[httpx2.URL, dict[str, str], dict]:
        """The URL rewritten to the checked address, the Host header, and the TLS server name."""
        host_header = self.url.host if self.url.port is None else f"{self.url.host}:{self.url.port}"
        if ":" in self.url.host:  # an IPv6 literal keeps its brackets in the Host header
            host_header = f"[{self.url.host}]" + (f":{self.url.port}" if self.url.port else "")
        ext = {"sni_hostname": self.url.host} if self.url.scheme == "https" else {}
        return self.url.copy_with(host=str(self.address)), {"Host": host_header}, ext


def _judged(address: Address) -> Address:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def allowed(address: Address, networks: list[ipaddress._BaseNetwork]) -> bool:
    address = _judged(address)
    if any(address in net for net in networks if net.version == address.version):
        return True
    return address.is_global and not address.is_multicast and not address.is_reserved


def check(url: str | httpx2.URL, networks: list[ipaddress._BaseNetwork]) -> Target:
    try:
        parsed = httpx2.URL(url) if isinstance(url, str) else url
    except Exception as exc:  # noqa: BLE001 - any parse failure is the caller's input
        raise UserError(f"not a valid URL: {str(url)[:200]!r} ({exc}).") from None
    if parsed.scheme not in ("http", "https"):
        raise UserError(f"only http and https URLs can be fetched, not {parsed.scheme or 'no scheme'!r}.")
    if parsed.userinfo:
        raise UserError("URLs with a user name or password are refused.")
    host = parsed.host
    if not host:
        raise UserError("the URL has no host.")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise UserError(f"cannot resolve {host!r}: {exc}.") from None
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    bad = [a for a in addresses if not allowed(a, networks)]
    if bad or not addresses:
        raise UserError(f"{host!r} resolves to {_judged(bad[0]) if bad else 'nothing'}, a private, loopback, link-local "
                        "or otherwise non-public address; web_fetch refuses it (an operator can allow a network "
                        "with [searxng] fetch_allow_networks).")
    return Target(parsed, addresses[0])


def networks_from(cidrs: list[str]) -> list[ipaddress._BaseNetwork]:
    return [ipaddress.ip_network(c, strict=False) for c in cidrs]
