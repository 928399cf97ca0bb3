"""SSRF rules for every fetch the server makes on a caller's behalf (security.md): web_fetch (plugin searxng)
and OAuth client ID metadata documents (persmem_core.auth.oauth.client_documents). http/https only, no credentials
in URLs; the host is resolved and every address must be public (or in networks the operator opened); the
connection goes to the checked address, so a DNS answer cannot change between check and use (`Guard.check`,
`Target.pinned`); a caller that follows redirects does it by hand and checks each hop again.

Numeric tricks (`127.1`, `2130706433`, `0x7f.1`) resolve to the address they mean and are judged by it. An
IPv6 address that delivers to an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`, 6to4
`2002:AABB:CCDD::`) is judged as that IPv4 address; other special-purpose IPv6 forms (Teredo, `::a.b.c.d`,
site-local `fec0::/10`, local-use NAT64...) are refused, naming the IPv4 address they embed."""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_network

import httpx2

from persmem_core import UserError

from persmem_core.net.resolver import Resolver

Address = IPv4Address | IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Special-purpose blocks (IANA's IPv4/IPv6 special-purpose registries) that Python 3.11's ipaddress still
# calls global, not reserved and not multicast.
NOT_PUBLIC = [ip_network(block) for block in (
    "192.0.0.0/24",  # IETF protocol assignments; 3.11 knows only 192.0.0.0/29 and 192.0.0.170/31
    "192.88.99.0/24",  # deprecated 6to4 relay anycast (RFC 7526)
    "fec0::/10",  # deprecated site-local (RFC 3879), still routed inside some sites
    "3fff::/20",  # documentation (RFC 9637)
    "5f00::/16",  # SRv6 segment identifiers (RFC 9602)
    "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215): translates into the operator's own IPv4 networks
)]
NAT64_WELL_KNOWN = ip_network("64:ff9b::/96")  # RFC 6052: the last 32 bits are the IPv4 destination
IPV4_COMPATIBLE = ip_network("::/96")  # deprecated ::a.b.c.d (RFC 4291)
IPV4_TRANSLATED = ip_network("::ffff:0:0:0/96")  # SIIT ::ffff:0:a.b.c.d (RFC 2765)


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


def carried_ipv4(address: Address) -> IPv4Address | None:
    """The IPv4 address a connection to this IPv6 address really reaches: IPv4-mapped (the same socket),
    NAT64 well-known prefix (through a translator), 6to4 (through a tunnel). None for anything else."""
    if address.version == 4:
        return None
    if address.ipv4_mapped:
        return address.ipv4_mapped
    if address in NAT64_WELL_KNOWN:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def embedded_ipv4(address: Address) -> list[IPv4Address]:
    """Every IPv4 address the IPv6 form embeds, carried or not, to name it in a refusal."""
    carried = carried_ipv4(address)
    if carried:
        return [carried]
    if address.version == 6 and address.teredo:
        return list(address.teredo)  # the Teredo server and the (de-obfuscated) client
    if address.version == 6 and (address in IPV4_TRANSLATED or (address in IPV4_COMPATIBLE and int(address) > 1)):
        return [IPv4Address(int(address) & 0xFFFFFFFF)]
    return []


def is_public(address: Address) -> bool:
    return (address.is_global and not address.is_multicast and not address.is_reserved
            and not (address.version == 6 and address.is_site_local)
            and not any(address in block for block in NOT_PUBLIC if block.version == address.version))


def _listed(address: Address, networks: list[Network]) -> bool:
    return any(address in net for net in networks if net.version == address.version)


def refusal(address: Address, networks: list[Network]) -> str | None:
    """None if the server may connect to `address`; else the address described for the error message."""
    judged = carried_ipv4(address) or address  # a form that delivers to an IPv4 address is that address
    if _listed(address, networks) or _listed(judged, networks) or is_public(judged):
        return None
    embedded = embedded_ipv4(address)
    return str(address) + (f" (which embeds {' and '.join(map(str, embedded))})" if embedded else "")


@dataclass(frozen=True)
class Guard:
    """What one kind of fetch may connect to on this server: public addresses, plus the networks the operator
    opened for it; names are resolved with the server's bounded lookups (resolver.py). `what` and `allow_hint`
    word the refusal ("web_fetch", "an operator can allow a network with [searxng] fetch_allow_networks")."""

    networks: list[Network]
    resolver: Resolver
    what: str = "the server"
    allow_hint: str = ""

    async def check(self, url: str | httpx2.URL) -> Target:
        """The URL's rules, then its host resolved and every address judged; cancellable (the call's deadline)."""
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
        port = parsed.port if parsed.port is not None else (443 if parsed.scheme == "https" else 80)
        if not 0 < port < 65536:  # getaddrinfo would wrap 99999 round to 34463
            raise UserError(f"port {port} is out of range; a port is 1 to 65535.")
        try:
            infos = await self.resolver.getaddrinfo(host, port)
        except (socket.gaierror, UnicodeError) as exc:
            raise UserError(f"cannot resolve {host!r}: {exc}.") from None
        addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
        refused = [why for why in (refusal(a, self.networks) for a in addresses) if why]
        if refused or not addresses:
            hint = f" ({self.allow_hint})" if self.allow_hint else ""
            raise UserError(f"{host!r} resolves to {refused[0] if refused else 'nothing'}, a private, loopback, "
                            f"link-local or otherwise non-public address; {self.what} refuses it{hint}.")
        return Target(parsed, addresses[0])


def networks_from(cidrs: list[str], setting: str) -> list[Network]:
    """The CIDRs of the config setting `setting` as networks; a value that is not one is refused, naming it."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            raise UserError(f"{setting}: {cidr!r} is not a network; write CIDRs such as "
                            "\"192.168.1.0/24\" or \"fd00::/8\" in persmem.toml.") from None
    return networks
