"""Chorus in a real Chromium: the unpacked extension, two mock chat tabs whose assistants use a real persmem
server's AMQ tools, the side panel page driving the exchange loop. Plus the extension's node unit tests."""

import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from chorus_mock import MockChat  # tests/ is on sys.path under pytest's default import mode
from persmem_core.testing import clean_env, free_port, start_server, write_config

ROOT = Path(__file__).parent.parent
EXTENSION = ROOT / "extension"
ARTIFACTS = ROOT / "test-artifacts" / "chorus"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def test_node_unit_tests_pass():
    node = shutil.which("node")
    assert node, "node is needed for the extension's unit tests (apt-get install nodejs)"
    result = subprocess.run([node, "--test", "tests/"], cwd=EXTENSION, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout


@pytest.fixture(scope="module")
def chorus(tmp_path_factory):
    """(browser context, extension id, persmem server, mock chat, tool caller)."""
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True,
            args=[f"--disable-extensions-except={EXTENSION}", f"--load-extension={EXTENSION}",
                  "--disable-background-networking", "--disable-component-update", "--no-first-run"])
        worker = context.service_workers[0] if context.service_workers else context.wait_for_event("serviceworker")
        extension_id = worker.url.split("/")[2]
        home = tmp_path_factory.mktemp("chorus-home")
        write_config(home, {"server": {"allowed_origins": [f"chrome-extension://{extension_id}"]},
                            "amq": {"readers": {"chorus": ["*"]}}})
        server = start_server(home, ("kite", "wren", "chorus"),
                              clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw,shell,git,searxng,dashboard"))
        pool = ThreadPoolExecutor(4)

        def call_tool(tool, args, agent):  # off Playwright's event-loop thread
            return pool.submit(server.call_tool, tool, args, agent=agent).result(timeout=60)

        mock = MockChat(server, call_tool)
        try:
            yield context, extension_id, server, mock, call_tool
        finally:
            mock.stop()
            server.stop()
            pool.shutdown()
            context.close()


def drain(call_tool):
    """Empty both inboxes so each scenario starts clean."""
    for agent in ("kite", "wren"):
        for m in call_tool("amq_check", {}, agent)["messages"]:
            call_tool("amq_read", {"agent": agent, "msg_id": m["id"]}, agent)


def run_loop(chorus, name, *, rounds, kite="", wren="", server_url=None, quiet=600, ceiling=20000, timeout=90):
    context, extension_id, server, mock, call_tool = chorus
    drain(call_tool)
    for prompts in mock.prompts.values():
        prompts.clear()
    tabs = {agent: context.new_page() for agent in ("kite", "wren")}
    for agent, page in tabs.items():
        page.goto(f"{mock.url}/chat/{agent}?{ {'kite': kite, 'wren': wren}[agent] }")
    panel = context.new_page()
    panel.goto(f"chrome-extension://{extension_id}/sidepanel.html")
    panel.click("#settings summary")
    panel.fill("#server-url", server_url or server.url.removesuffix("/mcp"))
    panel.fill("#token", server.tokens["chorus"])
    panel.fill("#rounds", str(rounds))
    panel.fill("#quiet-ms", str(quiet))
    panel.fill("#ceiling-ms", str(ceiling))
    panel.click("#save")
    panel.click("#refresh-tabs")
    for agent in ("kite", "wren"):
        select = panel.locator(f'select[data-agent="{agent}"]')
        select.select_option(label=f"Mock chat {agent}")
    panel.fill("#message", "Should we cache search results?")
    started = time.monotonic()
    panel.click("#fire")
    panel.locator('#log li[data-event="finished"]').wait_for(timeout=timeout * 1000)
    elapsed = time.monotonic() - started
    panel.screenshot(path=str(ARTIFACTS / f"{name}-panel.png"), full_page=True)
    for agent, page in tabs.items():
        page.screenshot(path=str(ARTIFACTS / f"{name}-{agent}.png"), full_page=True)
    log = panel.locator("#log li").all_inner_texts()
    states = {agent: panel.locator(f'#status li[data-agent="{agent}"] .state').inner_text() for agent in tabs}
    for page in [*tabs.values(), panel]:
        page.close()
    return log, states, elapsed


def test_full_exchange_flows_through_amq_and_stops_early_when_inboxes_are_empty(chorus):
    _, _, _, mock, call_tool = chorus
    log, states, _ = run_loop(chorus, "full", rounds=5)
    assert mock.prompts["kite"][0].startswith("[CHORUS] Should we cache search results?")
    assert mock.prompts["wren"][0].startswith("[CHORUS] Should we cache search results?")
    assert [p.split("]")[0] for p in mock.prompts["kite"]] == ["[CHORUS", "[AMQ-CHECK", "[AMQ-CHECK", "[AMQ-CHECK"]
    assert log[-1].startswith("finished") and "stopped early before round 4: no agent has unread mail" in log[-1]
    assert any("(server)" in line for line in log)
    history = call_tool("amq_history", {"agent": "wren", "limit": 50}, "wren")["messages"]
    subjects = [m["subject"] for m in history if m["from"] == "kite"]
    assert "Chorus: Should we cache search results?" in subjects and "Re: Re: Chorus: Should we cache search results?" in subjects
    assert states == {"kite": "done", "wren": "done"}


def test_runs_exactly_the_configured_rounds_and_a_changed_dom_falls_back(chorus):
    _, _, _, mock, _ = chorus
    log, states, _ = run_loop(chorus, "rounds-and-fallback", rounds=1, wren="variant=changed")
    assert "all 1 rounds done" in log[-1]
    assert len(mock.prompts["wren"]) == 2 and mock.prompts["wren"][1].startswith("[AMQ-CHECK]")
    assert states == {"kite": "done", "wren": "done"}


def test_completion_waits_for_a_slow_streaming_reply_and_the_ceiling_stops_a_hung_one(chorus):
    log, states, elapsed = run_loop(chorus, "slow-and-hung", rounds=0, kite="pause=2500", wren="hang=1",
                                    quiet=800, ceiling=6000)
    assert states == {"kite": "done", "wren": "timed out"}
    assert any("kite: done" in line and "wren: timed out" in line for line in log)
    assert 6 <= elapsed < 30


def test_without_the_server_the_loop_falls_back_to_page_text(chorus):
    log, states, _ = run_loop(chorus, "no-server", rounds=6, server_url=f"http://127.0.0.1:{free_port()}")
    assert any("(page text)" in line for line in log)
    assert 'every reply said "No new AMQ messages"' in log[-1] and "before round 5" in log[-1]


def test_the_token_never_reaches_the_chat_pages(chorus):
    _, _, server, mock, _ = chorus
    token = server.tokens["chorus"]
    assert all(token not in prompt for prompts in mock.prompts.values() for prompt in prompts)
    assert token not in server.log()
