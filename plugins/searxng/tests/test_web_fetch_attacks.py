"""web_fetch against hostile servers and addresses (issue 13), grouped by attack:

- holding the call past its deadline: dripping headers or body, slow redirect chains, a connect that never
  completes, a DNS server that never answers;
- reaching a private network through an IPv6 form that embeds an IPv4 address, or a special-purpose range;
- redirecting to somewhere web_fetch would refuse if asked directly, or to no valid URL at all;
- making it hold or decode too much: compression bombs, compressed bodies trailed by junk, huge headers,
  bodies that lie about their encoding or charset.

The fixture server allows 127.0.0.2/32 (fetch_allow_networks) with [searxng] timeout = 2 s."""

import ipaddress
import os
import shutil
import socket
import time

import anyio
import pytest

from persmem_core.sdk.testing import ToolCallError, tool_result

from fakeweb import DRIP_SECONDS, FakeWeb, start
from persmem_core.sdk import MAX_HUNG_LOOKUPS, refusal

TIMEOUT = 2.0  # the fixture server's [searxng] timeout
ENDS_BY = TIMEOUT + 1.5  # the deadline plus an MCP round trip on a busy 2-core machine


def call(server, tool, **args):
    return server.call_tool(tool, args, agent="kite")


def refused_within_deadline(server, url: str, match: str) -> float:
    """Call web_fetch, expect an error matching `match` before ENDS_BY seconds; returns when it ended."""
    started = time.monotonic()
    with pytest.raises(ToolCallError, match=match):
        call(server, "web_fetch", url=url)
    ended = time.monotonic()
    assert ended - started < ENDS_BY, f"web_fetch took {ended - started:.1f} s with a {TIMEOUT} s timeout"
    return ended


def hung_up_after(path: str, ended: float) -> float:
    """Seconds between the tool's answer and the moment the hostile server saw its connection closed."""
    for _ in range(60):
        if path in FakeWeb.hung_up:
            return FakeWeb.hung_up[path][0] - ended
        time.sleep(0.05)
    raise AssertionError(f"the connection to {path} was still open 3 s after web_fetch answered")


DEADLINE = r"stopped after 2 s while {}.*within \[searxng\] timeout = 2 s"


# --- holding web_fetch past its deadline -------------------------------------------------------------------

@pytest.mark.parametrize("path,doing", [
    ("/drip-body", r"downloading .*/drip-body \(\d+ bytes so far\)"),
    ("/drip-headers", r"waiting for .*/drip-headers to answer"),
])
def test_a_server_dripping_a_byte_at_a_time_is_cut_off_at_the_deadline_and_hung_up_on(server, web, path, doing):
    FakeWeb.hung_up.pop(path, None)
    ended = refused_within_deadline(server, web["site"] + path, DEADLINE.format(doing))
    # The connection is closed, not left to a thread still reading: the server's next drip write fails.
    assert hung_up_after(path, ended) < 2 * DRIP_SECONDS + 1.0


def test_a_chain_of_slow_redirects_shares_one_deadline(server, web):
    # Each hop answers in 0.8 s, well inside a per-request timeout of 2 s; five of them are not.
    refused_within_deadline(server, web["site"] + "/slow-hop/4",
                            DEADLINE.format(r"(waiting for .*/slow-hop/[0-3] to answer|resolving .*a redirect)"))


def test_a_connect_that_never_completes_is_cut_off_at_the_deadline(server):
    with socket.socket() as listener:
        listener.bind(("127.0.0.2", 0))
        listener.listen(0)  # never accepted: once its queue holds one connection, the kernel drops new SYNs
        filler = socket.create_connection(listener.getsockname())
        try:
            refused_within_deadline(server, "http://127.0.0.2:%d/" % listener.getsockname()[1],
                                    DEADLINE.format("waiting for .* to answer"))
        finally:
            filler.close()


def threads_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


@pytest.fixture
def server_with_a_dead_dns(tmp_path, web):
    """A persmem server whose /etc/resolv.conf (in its own mount namespace) names a DNS server that never
    answers, with a 30 s resolver timeout: every name lookup hangs inside getaddrinfo."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("giving the server its own /etc/resolv.conf needs root and unshare")
    silent_dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent_dns.bind(("127.0.83.53", 53))  # bound, never read: queries are neither answered nor refused
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.83.53\noptions timeout:30 attempts:1\n")
    running = start(tmp_path / "home", web["searx"], timeout=TIMEOUT, prefix=(
        "unshare", "--mount", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(resolv)))
    yield running
    running.stop()
    silent_dns.close()


def test_a_dns_server_that_never_answers_is_cut_off_and_cannot_pile_up_threads(server_with_a_dead_dns):
    server = server_with_a_dead_dns
    before = threads_of(server.process.pid)
    refused_within_deadline(server, "http://hung.example/", DEADLINE.format("resolving the host of http://hung"))

    async def many_at_once():
        errors = []

        async def one(n):
            async with server.client("kite") as client:
                errors.append(tool_result_error(await client.call_tool("web_fetch", {"url": f"http://h{n}.example/"})))

        async with anyio.create_task_group() as group:
            for n in range(MAX_HUNG_LOOKUPS + 4):
                group.start_soon(one, n)
        return errors

    started = time.monotonic()
    errors = anyio.run(many_at_once)
    assert time.monotonic() - started < ENDS_BY + 1.0
    hung = [e for e in errors if "while resolving the host" in e]
    refused = [e for e in errors if f"{MAX_HUNG_LOOKUPS} name lookups are still waiting" in e]
    assert len(hung) + len(refused) == len(errors) and refused, errors
    # At most MAX_HUNG_LOOKUPS lookups hang in threads, however many calls were made.
    assert threads_of(server.process.pid) <= before + MAX_HUNG_LOOKUPS
    assert call(server, "persmem_whoami")["agent"] == "kite"
    stopping = time.monotonic()
    server.stop()  # the hung lookups are daemon threads: they do not hold the server's exit
    assert time.monotonic() - stopping < 5 and server.process.returncode is not None


def tool_result_error(result) -> str:
    with pytest.raises(ToolCallError) as refused:
        tool_result(result)
    return str(refused.value)


# --- private networks through IPv6 forms that embed IPv4, and special-purpose ranges -------------------------

@pytest.mark.parametrize("url,named", [
    ("http://[2002:7f00:1::1]/", "which embeds 127.0.0.1"),  # 6to4
    ("http://[2002:a00:1::1]/", "which embeds 10.0.0.1"),
    ("http://[2002:c0a8:101::1]/", "which embeds 192.168.1.1"),
    ("http://[2002:a9fe:a9fe::]/latest/meta-data/", "which embeds 169.254.169.254"),
    ("http://[64:ff9b::7f00:1]/", "which embeds 127.0.0.1"),  # NAT64 well-known prefix
    ("http://[64:ff9b::a9fe:a9fe]/", "which embeds 169.254.169.254"),
    ("http://[64:ff9b:1::a00:1]/", "64:ff9b:1::a00:1"),  # local-use NAT64 (RFC 8215)
    ("http://[::127.0.0.1]/", "which embeds 127.0.0.1"),  # IPv4-compatible
    ("http://[::ffff:0:7f00:1]/", "which embeds 127.0.0.1"),  # IPv4-translated
    ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "and 127.0.0.1"),  # Teredo, client 127.0.0.1
    ("http://[::ffff:10.0.0.1]/", "which embeds 10.0.0.1"),  # IPv4-mapped
    ("http://[fec0::1]/", "fec0::1"),  # site-local
    ("http://[3fff::1]/", "3fff::1"),  # documentation (RFC 9637)
    ("http://[5f00::1]/", "5f00::1"),  # SRv6 segment identifiers
    ("http://[fd00::1]/", "fd00::1"),  # unique local
    ("http://[ff02::1]/", "ff02::1"),  # multicast
    ("http://192.0.0.8/", "192.0.0.8"),  # IETF protocol assignments
    ("http://192.88.99.1/", "192.88.99.1"),  # deprecated 6to4 relay anycast
])
def test_ipv6_forms_and_special_ranges_that_reach_non_public_addresses_are_refused(server, url, named):
    started = time.monotonic()
    with pytest.raises(ToolCallError, match=rf"resolves to .*{named}.*non-public address.*fetch_allow_networks"):
        call(server, "web_fetch", url=url)
    assert time.monotonic() - started < 1.5  # refused before any connection, not after a timeout


def test_an_embedded_address_in_the_allowed_networks_is_reachable(server, web):
    # ::ffff:127.0.0.2 is the allowed 127.0.0.2 itself (the same socket), so it is judged as that address.
    page = call(server, "web_fetch", url=web["site"].replace("127.0.0.2", "[::ffff:127.0.0.2]") + "/plain.txt")
    assert page["content"].startswith("just text")


@pytest.mark.parametrize("address", ["2002:808:808::1", "64:ff9b::808:808", "::ffff:8.8.8.8", "2606:4700::1111"])
def test_forms_that_deliver_to_a_public_address_are_judged_public(address):
    # The other half of the rule, without the internet a real fetch would need: judged by what they carry.
    assert refusal(ipaddress.ip_address(address), []) is None


# --- redirects to what web_fetch refuses -------------------------------------------------------------------

@pytest.mark.parametrize("path,why", [
    ("/go-file", "only http and https URLs can be fetched, not 'file'"),
    ("/go-gopher", "only http and https URLs can be fetched, not 'gopher'"),
    ("/go-credentials", "URLs with a user name or password are refused"),
    ("/go-nowhere", r"redirects to 'http://\[::1', which is not a valid URL"),
    ("/go-port", "port 99999 is out of range; a port is 1 to 65535"),
])
def test_a_redirect_to_a_refused_or_invalid_url_is_refused_clearly(server, web, path, why):
    before = len(FakeWeb.seen)
    with pytest.raises(ToolCallError, match=why):
        call(server, "web_fetch", url=web["site"] + path)
    assert [s[0] for s in FakeWeb.seen[before:]] == [path]  # nothing else was asked


def test_an_out_of_range_port_is_refused_not_wrapped_round(server):
    with pytest.raises(ToolCallError, match="port 99999 is out of range"):
        call(server, "web_fetch", url="http://127.0.0.2:99999/")  # getaddrinfo would make it port 34463


# --- making web_fetch hold or decode too much ----------------------------------------------------------------

def test_a_compression_bomb_stops_at_fetch_max_bytes_of_decoded_text(server, web):
    page = call(server, "web_fetch", url=web["site"] + "/gzip-bomb", extract=False, max_chars=5_000_000)
    assert page["truncated"] and page["content"] == "a" * 1_000_000  # fetch_max_bytes, of 20 MB it would make


def test_a_compressed_body_trailed_by_junk_stops_at_fetch_max_bytes_as_sent(server, web):
    # The junk decodes to nothing, so only a cap on the bytes as sent stops it (zlib would keep it all).
    FakeWeb.hung_up.pop("/gzip-then-garbage", None)
    page = call(server, "web_fetch", url=web["site"] + "/gzip-then-garbage", extract=False)
    assert page["content"] == "hello" and page["truncated"]
    hung_up_after("/gzip-then-garbage", time.monotonic())
    sent = FakeWeb.hung_up["/gzip-then-garbage"][1]
    assert sent < 20_000_000  # of 100 MB offered: 1 MB read, the rest stuck in socket buffers when it hung up


@pytest.mark.parametrize("path,answer", [
    ("/huge-headers", "sent a broken or oversized HTTP answer"),
    ("/not-gzip", "sent a body that does not decode as its Content-Encoding says"),
])
def test_an_oversized_or_lying_answer_gets_a_clear_error(server, web, path, answer):
    with pytest.raises(ToolCallError, match=answer) as refused:
        call(server, "web_fetch", url=web["site"] + path)
    assert "internal error" not in str(refused.value)


def test_a_charset_that_cannot_decode_with_replacement_falls_back_to_utf8(server, web):
    page = call(server, "web_fetch", url=web["site"] + "/idna-charset")
    assert page["content"] == "hello in an odd charset"
