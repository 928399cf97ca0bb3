"""docs/plugins.md is executed: every code block that names a file is written out, the plugins they make are
loaded into a real server, and each thing the page says they do is checked. The page cannot drift."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx2
import pytest

from persmem_core.net.addresses import free_port
from persmem_core.transport.server_process import RunningServer
from persmem_core.transport.tool_answers import ToolCallError

DOC = Path(__file__).parent.parent / "docs" / "plugins.md"
FILE_BLOCK = re.compile(r"^```python (\S+)\n(.*?)^```$", re.M | re.S)
MODULES = "persmem_bookmarks.plugin,persmem_bookmark_log.plugin"


@pytest.fixture(scope="module")
def doc_plugins(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("docplugins")
    blocks = FILE_BLOCK.findall(DOC.read_text())
    assert {path for path, _ in blocks} >= {
        "persmem_bookmarks/plugin.py", "persmem_bookmarks/service.py", "persmem_bookmarks/tools.py",
        "persmem_bookmarks/panels.py", "persmem_bookmarks/web.py", "persmem_bookmarks/commands.py",
        "persmem_bookmark_log/plugin.py", "persmem_flaky/plugin.py"}
    for path, body in blocks:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body)
    for package in {Path(path).parts[0] for path, _ in blocks}:
        (root / package / "__init__.py").touch()
    return root


def plugin_env(root: Path, modules: str) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p),
            "PERSMEM_PLUGIN_MODULES": modules}


def dashboard_login(client: httpx2.Client, server: RunningServer, agent: str) -> None:
    base = server.base_url + "/dashboard"
    form = client.get(base + "/login").text
    csrf = form.split('name="_csrf_token" value="', 1)[1].split('"', 1)[0]
    assert client.post(base + "/login", data={"token": server.tokens[agent], "_csrf_token": csrf}).status_code == 302


def test_the_walkthrough_plugin_does_what_the_page_says(doc_plugins, persmem_server, run_cli, persmem_env):
    env = plugin_env(doc_plugins, MODULES) | {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw,shell,git,searxng"}
    server = persmem_server(agents=["kite", "wren"], env=env)

    # the tools: the caller from its credentials, never from an argument; errors carry the fix
    schema = {t.name: t.input_schema for t in server.list_tools(agent="kite")}["bookmark_add"]
    assert set(schema["properties"]) == {"url", "title"}
    saved = server.call_tool("bookmark_add", {"url": "https://example.org/a", "title": "<script>x</script>"},
                             agent="kite")
    assert saved == {"status": "saved", "url": "https://example.org/a", "title": "<script>x</script>"}
    assert server.call_tool("bookmark_list", {}, agent="kite")["count"] == 1
    assert server.call_tool("bookmark_list", {}, agent="wren")["count"] == 0
    with pytest.raises(ToolCallError, match="must start with http"):
        server.call_tool("bookmark_add", {"url": "ftp://x"}, agent="kite")

    # the hook of its own, answered by another plugin that does not import it
    assert server.call_tool("bookmark_log_count", {}, agent="kite") == {"saved": 1}

    # the route: agents only, the caller named by the scope
    recent = httpx2.get(server.base_url + "/bookmarks/recent", headers=server.headers("kite"), timeout=10)
    assert recent.json() == {"recent": ["https://example.org/a"]}
    assert httpx2.get(server.base_url + "/bookmarks/recent", timeout=10).status_code == 401

    # the panel: the logged-in agent's bookmarks, escaped
    with httpx2.Client(timeout=10) as browser:
        dashboard_login(browser, server, "kite")
        page = browser.get(server.base_url + "/dashboard/bookmarks")
        assert page.status_code == 200 and "&lt;script&gt;x&lt;/script&gt;" in page.text
        assert "<script>x</script>" not in page.text

    # the doctor line, and the command that runs without a server
    doctor = run_cli("doctor", env=server.env)
    assert "PASS  bookmarks: 1 kept" in doctor.stdout
    server.stop()
    exported = run_cli("bookmarks", "export", env=server.env)
    assert exported.returncode == 0 and '"url":"https://example.org/a"' in exported.stdout

    # durable: a new server on the same home still has it
    again = RunningServer(server.home, server.env, free_port(), server.tokens).start()
    try:
        assert again.call_tool("bookmark_list", {}, agent="kite")["count"] == 1
    finally:
        again.stop()


def test_the_config_section_of_the_page_is_validated_and_used(doc_plugins, persmem_server):
    server = persmem_server(agents=["kite"], config={"bookmarks": {"max_per_agent": 1}},
                            env=plugin_env(doc_plugins, MODULES) | {"PERSMEM_DISABLE_PLUGINS": "memory_hnsw"})
    server.call_tool("bookmark_add", {"url": "https://example.org/one"}, agent="kite")
    with pytest.raises(ToolCallError, match=r"\[bookmarks\] max_per_agent"):
        server.call_tool("bookmark_add", {"url": "https://example.org/two"}, agent="kite")


def test_the_failing_startup_of_the_page_ends_as_the_page_says(doc_plugins, run_cli, persmem_env):
    said = re.search(r"^```text\n(Error: plugin 'persmem_flaky.plugin'.*?)\n```$", DOC.read_text(), re.M | re.S)
    for transport in ("http", "stdio"):
        result = run_cli("serve", "--transport", transport, "--port", "0", input="",
                         env=persmem_env(**plugin_env(doc_plugins, "persmem_flaky.plugin")))
        assert result.returncode == 1
        assert result.stderr.strip().splitlines()[-1] == said.group(1)
