"""web_search against a local server that answers like SearXNG; web_fetch and security.md's SSRF rules."""

import socket
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persmem_core.sdk.testing import (ToolCallError, assert_tools_answer_clearly, clean_env, free_port, persmem_command,
                                  write_config)

from fakeweb import FakeWeb, start


def call(server, tool, **args):
    return server.call_tool(tool, args, agent="kite")


def test_persmem_signatures(server):
    tools = {t.name: t.input_schema["properties"] for t in server.list_tools(agent="kite")}
    assert tools["web_search"]["max_results"]["default"] == 5
    assert tools["web_fetch"]["max_chars"]["default"] == 80000 and tools["web_fetch"]["extract"]["default"] is True
    assert "url" not in tools["web_search"]  # the SearXNG URL comes from config only


def test_search_returns_compact_results(server):
    found = call(server, "web_search", query="maildir format", max_results=5, categories="it", language="en",
                 time_range="year")
    assert found["count"] == 3 and [r["engine"] for r in found["results"]] == ["duckduckgo", "brave", "qwant"]
    assert set(found["results"][0]) == {"title", "url", "content", "engine"}
    path, params, _ = FakeWeb.seen[-1]
    assert path == "/search" and params == {"q": "maildir format", "format": "json", "pageno": "1",
                                            "categories": "it", "language": "en", "time_range": "year"}
    assert call(server, "web_search", query="maildir", max_results=1)["count"] == 1


def test_search_errors_say_what_to_fix(server, tmp_path):
    with pytest.raises(ToolCallError, match="add `json` to search.formats"):
        call(server, "web_search", query="force 403")
    with pytest.raises(ToolCallError, match="did not answer within 2 s"):
        call(server, "web_search", query="force slow")
    with pytest.raises(ToolCallError, match="did not return its JSON result format"):
        call(server, "web_search", query="force html")
    with pytest.raises(ToolCallError, match="query is empty"):
        call(server, "web_search", query="  ")
    down = start(tmp_path / "home", f"http://127.0.0.1:{free_port()}")
    try:
        with pytest.raises(ToolCallError, match="is not reachable .* fix \\[searxng\\] url"):
            call(down, "web_search", query="anything")
        doctor = subprocess.run([sys.executable, "-m", "persmem_core", "doctor"], env=down.env, capture_output=True,
                                text=True, timeout=60)
        assert "WARN" in doctor.stdout and "searxng" in doctor.stdout
    finally:
        down.stop()


def test_fetch_extracts_readable_text_and_follows_checked_redirects(server, web):
    page = call(server, "web_fetch", url=web["site"] + "/page.html")
    assert page["title"] == "Maildir explained" and "delivery is atomic" in page["content"]
    assert "Home | About" not in page["content"] and "alert" not in page["content"]
    raw = call(server, "web_fetch", url=web["site"] + "/page.html", extract=False, max_chars=100)
    assert raw["content"].startswith("<html>") and raw["truncated"] and len(raw["content"]) == 100
    moved = call(server, "web_fetch", url=web["site"] + "/go-page")
    assert moved["url"].endswith("/page.html") and "delivery is atomic" in moved["content"]
    assert call(server, "web_fetch", url=web["site"] + "/plain.txt")["content"].startswith("just text")
    big = call(server, "web_fetch", url=web["site"] + "/big.txt", max_chars=10)
    assert big["truncated"] and big["content"] == "y" * 10
    with pytest.raises(ToolCallError, match="image/png, not text"):
        call(server, "web_fetch", url=web["site"] + "/image.png")
    with pytest.raises(ToolCallError, match="more than 5 redirects"):
        call(server, "web_fetch", url=web["site"] + "/loop")


def targets(port):
    return [f"http://127.0.0.1:{port}/secret", f"http://127.1:{port}/secret", f"http://2130706433:{port}/secret",
            f"http://0x7f.1:{port}/secret", f"http://[::ffff:127.0.0.1]:{port}/secret", f"http://localhost:{port}/secret",
            f"http://[::1]:{port}/", "http://169.254.169.254/latest/meta-data/", "http://10.1.2.3/",
            "http://192.168.0.1/", "http://100.64.0.1/", "http://0.0.0.0/", "http://[fe80::1]/"]


@pytest.mark.parametrize("index", range(13))
def test_private_loopback_and_link_local_targets_are_refused(server, web, index):
    before = len(FakeWeb.seen)
    with pytest.raises(ToolCallError, match="non-public address"):
        call(server, "web_fetch", url=targets(web["internal_port"])[index])
    assert not [s for s in FakeWeb.seen[before:] if s[0] == "/secret"]


@pytest.mark.parametrize("url,why", [
    ("file:///etc/passwd", "only http and https"), ("ftp://example.com/x", "only http and https"),
    ("gopher://127.0.0.1:70/", "only http and https"), ("http://user:pw@example.com/", "user name or password"),
    ("not a url", "only http and https"), ("http:///nohost", "no host|cannot resolve|not a valid URL")])
def test_other_schemes_and_credentials_are_refused(server, url, why):
    with pytest.raises(ToolCallError, match=why):
        call(server, "web_fetch", url=url)


def test_a_redirect_to_an_internal_address_is_refused(server, web):
    before = len(FakeWeb.seen)
    with pytest.raises(ToolCallError, match="non-public address"):
        call(server, "web_fetch", url=web["site"] + "/go-internal")
    assert [s[0] for s in FakeWeb.seen[before:]] == ["/go-internal"]  # the internal /secret was never asked


def test_the_connection_is_pinned_to_the_checked_address(server, web):
    call(server, "web_fetch", url=web["site"] + "/plain.txt")
    assert FakeWeb.seen[-1][2] == web["site"].removeprefix("http://")  # Host header kept, address pinned
    assert socket.gethostbyname("127.0.0.2") == "127.0.0.2"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.one_of(st.text(max_size=300), st.integers()),
       url=st.one_of(st.text(max_size=200), st.sampled_from(["http://[::]/", "http://%00/", "https://:0/", "http://a" * 3])),
       max_chars=st.one_of(st.integers(-5, 10**7), st.none()))
def test_any_arguments_give_a_result_or_a_clear_error(server, query, url, max_chars):
    assert_tools_answer_clearly(server, [
        ("web_search", {"query": query}),
        ("web_fetch", {"url": url, "max_chars": max_chars}),
    ], "kite")


def test_a_setting_that_is_not_a_network_stops_the_server_naming_it(tmp_path):
    """Networks are read once, at startup: a typo must not leave every web_fetch failing while the server runs."""
    home = tmp_path / "home"
    write_config(home, {"searxng": {"fetch_allow_networks": ["192.168.1.0/24", "my-lan"]}})
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw,amq_maildir,shell,git,dashboard")
    doctor = subprocess.run(persmem_command("doctor"), env=env, capture_output=True, text=True, timeout=60)
    assert "FAIL" in doctor.stdout and "'my-lan' is not a network" in doctor.stdout
    serve = subprocess.run(persmem_command("serve", "--port", str(free_port())), env=env, capture_output=True,
                           text=True, timeout=60)
    last = serve.stderr.strip().splitlines()[-1]
    assert serve.returncode == 1 and "plugin 'searxng' failed to start" in last
    assert "[searxng] fetch_allow_networks: 'my-lan' is not a network" in last
