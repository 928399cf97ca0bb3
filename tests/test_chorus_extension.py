"""Chorus in a real Chromium: the built extension (dist/chromium, built once per session), two mock chat tabs whose
assistants use a real persmem server's AMQ tools, the side panel page driving the exchange loop; "Check this tab",
selector packs from Settings, settings export/import and where the token is stored. Plus the node unit tests."""

import json
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from chorus_build import built_extension  # tests/ is on sys.path under pytest's default import mode
from chorus_mock import MockChat, drain
from persmem_core.net.addresses import free_port
from persmem_core.testing import clean_env, start_server, write_config

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
    extension = built_extension("chromium")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, accept_downloads=True,
            args=[f"--disable-extensions-except={extension}", f"--load-extension={extension}",
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


def open_panel(chorus):
    context, extension_id, *_ = chorus
    panel = context.new_page()
    panel.goto(f"chrome-extension://{extension_id}/sidepanel.html")
    panel.wait_for_function("() => document.getElementById('origin').textContent !== ''")  # load() has filled the form
    return panel


def save_packs(panel, packs_json):
    """Types selector packs into Settings and saves; returns (state, text) of the message next to Save."""
    if not panel.evaluate("document.getElementById('settings').open"):
        panel.click("#settings summary")
    panel.fill("#selector-packs", packs_json)
    panel.evaluate("document.getElementById('saved').textContent = ''")
    panel.click("#save")
    panel.wait_for_function("() => document.getElementById('saved').textContent !== ''")
    return panel.locator("#saved").get_attribute("data-state"), panel.inner_text("#saved")


def check_tab(chorus, name, query, *, packs=""):
    """Opens a mock chat tab for kite, assigns it, clicks kite's Check button: (title, {key: (index, selector, text)})."""
    context, _, _, mock, _ = chorus
    tab = context.new_page()
    tab.goto(f"{mock.url}/chat/kite?{query}")
    panel = open_panel(chorus)
    assert save_packs(panel, packs)[0] == "ok"
    panel.click("#refresh-tabs")
    panel.locator('select[data-agent="kite"]').select_option(label="Mock chat kite")
    panel.click('button[data-check-agent="kite"]')
    panel.locator('#check-result[data-agent="kite"][data-state="done"]').wait_for(timeout=10000)
    panel.screenshot(path=str(ARTIFACTS / f"check-{name}-panel.png"), full_page=True)
    rows = {}
    for li in panel.locator("#check-result li").all():
        rows[li.get_attribute("data-key")] = (li.get_attribute("data-index"), li.get_attribute("data-selector"),
                                              li.inner_text())
    title = panel.inner_text("#check-title")
    save_packs(panel, "")  # later scenarios run with the built-in packs
    tab.close()
    panel.close()
    return title, rows


def test_check_this_tab_finds_all_four_with_the_generic_pack(chorus):
    title, rows = check_tab(chorus, "all-found", "showstop=1")
    assert 'pack "generic"' in title and "127.0.0.1" in title
    assert list(rows) == ["input", "submit", "responseContainer", "streamingIndicator"]
    assert rows["input"][:2] == ("0", 'div[contenteditable="true"].ProseMirror')
    assert rows["submit"][:2] == ("0", 'button[aria-label="Send Message"]')
    assert rows["responseContainer"][:2] == ("0", '[data-testid="chat-message-list"]')
    assert rows["streamingIndicator"][:2] == ("0", '[data-testid="stop-button"]')
    assert all("the first selector" in text for _, _, text in rows.values())


def test_check_this_tab_on_a_changed_dom_shows_which_fallback_matched(chorus):
    title, rows = check_tab(chorus, "changed", "variant=changed")
    assert rows["input"][:2] == ("1", 'div[contenteditable="true"]')
    assert "input: fallback #2 of 4" in rows["input"][2]
    assert rows["submit"][:2] == ("2", 'button[aria-label="Send"]')
    assert rows["responseContainer"][0] == "0"
    assert rows["streamingIndicator"][0] == "none"
    assert "none of 2 selectors matched (normal while no reply is being written)" in rows["streamingIndicator"][2]


def test_a_users_selector_pack_for_the_host_is_merged_over_the_built_in_ones(chorus):
    packs = json.dumps({"127.0.0.1": {"input": ["div.gone", "div#input"], "submit": ["button.gone"]}})
    title, rows = check_tab(chorus, "user-pack", "variant=changed", packs=packs)
    assert 'pack "127.0.0.1" (with your changes)' in title
    assert rows["input"][:2] == ("1", "div#input")
    assert rows["submit"][0] == "none" and "none of 1 selectors matched" in rows["submit"][2]
    assert rows["responseContainer"][:2] == ("0", '[data-testid="chat-message-list"]')  # from the generic pack


def test_a_selector_pack_that_does_not_parse_is_refused_with_its_place(chorus):
    panel = open_panel(chorus)
    state, text = save_packs(panel, json.dumps({"example.com": {"submit": ["button", "div["]}}))
    assert state == "error"
    assert 'not saved: selector pack "example.com", submit[1]: "div[" is not a valid CSS selector' in text
    state, text = save_packs(panel, json.dumps({"example.com": {"inputs": ["textarea"]}}))
    assert state == "error" and 'unknown key "inputs" (known keys: input, submit' in text
    stored = panel.evaluate("chrome.storage.sync.get('settings')")["settings"]
    assert stored["selectorPacks"] == {}  # nothing refused was stored
    panel.close()


def test_settings_export_and_import_round_trip_without_the_token(chorus, tmp_path):
    panel = open_panel(chorus)
    panel.click("#settings summary")
    panel.fill("#token", "token-that-must-not-leave")
    panel.fill("#rounds", "7")
    packs = {"chat.example.com": {"input": ["textarea#q"]}}
    assert save_packs(panel, json.dumps(packs))[0] == "ok"
    with panel.expect_download() as download:
        panel.click("#export-settings")
    exported = tmp_path / download.value.suggested_filename
    download.value.save_as(exported)
    text = exported.read_text()
    assert exported.name == "chorus-settings.json"
    assert "token-that-must-not-leave" not in text
    file = json.loads(text)
    assert file["kind"] == "chorus-settings" and "token" not in file["settings"]
    assert file["settings"]["rounds"] == 7 and file["settings"]["selectorPacks"] == packs

    panel.fill("#token", "the-current-token")
    panel.fill("#rounds", "2")
    assert save_packs(panel, "")[0] == "ok"
    file["settings"]["token"] = "planted-token"  # a hand-edited file's token is ignored
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps(file))
    panel.set_input_files("#import-file", str(planted))
    panel.locator('#import-result[data-state="ok"]').wait_for(timeout=5000)
    assert "the token was kept (ignored from the file: token)" in panel.inner_text("#import-result")
    assert panel.input_value("#rounds") == "7"
    assert json.loads(panel.input_value("#selector-packs")) == packs
    assert panel.input_value("#token") == "the-current-token"
    assert panel.evaluate("chrome.storage.local.get('token')")["token"] == "the-current-token"

    (tmp_path / "other.json").write_text('{"rounds": 3}')
    panel.set_input_files("#import-file", str(tmp_path / "other.json"))
    panel.locator('#import-result[data-state="error"]').wait_for(timeout=5000)
    assert "not imported: not a Chorus settings file" in panel.inner_text("#import-result")
    save_packs(panel, "")
    panel.close()


def test_settings_are_synced_without_the_token_and_an_old_local_token_migrates(chorus):
    panel = open_panel(chorus)
    panel.click("#settings summary")
    panel.fill("#token", "local-only-token")
    panel.fill("#rounds", "5")
    panel.click("#save")
    panel.wait_for_function("() => document.getElementById('saved').textContent === 'saved'")
    synced = panel.evaluate("chrome.storage.sync.get(null)")
    local = panel.evaluate("chrome.storage.local.get(null)")
    assert synced["settings"]["rounds"] == 5 and "token" not in synced["settings"]
    assert "local-only-token" not in json.dumps(synced)
    assert local["token"] == "local-only-token" and "settings" not in local

    # an older Chorus kept everything, token included, in local storage
    panel.evaluate("""async () => {
        await chrome.storage.sync.clear();
        await chrome.storage.local.remove("token");
        await chrome.storage.local.set({settings: {token: "legacy-token", rounds: 4, serverUrl: "http://127.0.0.1:1"}});
    }""")
    panel.reload()
    # load() fills the form after the migration has written both areas
    panel.wait_for_function("() => document.getElementById('rounds').value === '4'")
    assert panel.input_value("#token") == "legacy-token"
    synced = panel.evaluate("chrome.storage.sync.get(null)")
    local = panel.evaluate("chrome.storage.local.get(null)")
    assert synced["settings"]["rounds"] == 4 and "token" not in synced["settings"]
    assert local["token"] == "legacy-token" and "settings" not in local
    panel.close()
