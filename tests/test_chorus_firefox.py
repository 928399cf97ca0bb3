"""Chorus in a real Firefox (Debian's firefox-esr, headless): the built extension (dist/firefox) installed over
WebDriver BiDi by puppeteer-core, two mock chat tabs whose assistants use a real persmem server's AMQ tools, and the
Chorus page driving the exchange loop, in Firefox's own sidebar and in a tab. The same scenarios as the Chromium
test (test_chorus_extension.py).

The browser side is extension/tests/firefox/driver.mjs, a node process this module starts once: it gets its setup
as JSON on the command line, then one scenario per stdin line, and answers each with a JSON line (log lines,
per-agent states, elapsed time, screenshot paths). The extension's pages cannot be scripted over Firefox's BiDi
(it leaves out extension documents), so the driver reaches them through Firefox's devtools protocol."""

import json
import queue
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from chorus_build import built_extension  # tests/ is on sys.path under pytest's default import mode
from chorus_mock import MockChat, drain
from persmem_core.net.addresses import free_port
from persmem_core.testing import clean_env, start_server, write_config

ROOT = Path(__file__).parent.parent
EXTENSION = ROOT / "extension"
DRIVER = EXTENSION / "tests" / "firefox" / "driver.mjs"
ARTIFACTS = ROOT / "test-artifacts" / "chorus"
FIREFOX = shutil.which("firefox-esr") or "/usr/bin/firefox-esr"
# The add-on's moz-extension UUID, fixed through the extensions.webextensions.uuids pref, so the server can allow it.
UUID = "6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b"
ORIGIN = f"moz-extension://{UUID}"
MESSAGE = "Should we cache search results?"


class Driver:
    """The node driver process: send() a scenario, get its JSON result back."""

    def __init__(self, setup: dict, stderr_path: Path):
        self.stderr_path = stderr_path
        self.stderr = open(stderr_path, "w")
        self.process = subprocess.Popen(["node", str(DRIVER), json.dumps(setup)], cwd=EXTENSION, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def receive(self, timeout: float) -> dict:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the Firefox driver said nothing for {timeout} s; its log: {self.log_tail()}")
        if line is None:
            raise AssertionError(f"the Firefox driver exited ({self.process.poll()}); its log: {self.log_tail()}")
        return json.loads(line)

    def send(self, scenario: dict, timeout: float) -> dict:
        self.process.stdin.write(json.dumps(scenario) + "\n")
        self.process.stdin.flush()
        return self.receive(timeout)

    def log_tail(self) -> str:
        self.stderr.flush()
        return self.stderr_path.read_text()[-3000:]

    def close(self):
        try:
            self.process.stdin.close()
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.terminate()  # the driver closes Firefox on SIGTERM
            self.process.wait(timeout=10)
        self.stderr.close()


@pytest.fixture(scope="module")
def chorus(tmp_path_factory):
    """(driver, its ready report, persmem server, mock chat, tool caller)."""
    assert Path(FIREFOX).exists(), "the Firefox test needs Debian's Firefox ESR: apt-get install firefox-esr " \
                                   "(tests/run.sh installs it)"
    assert shutil.which("node"), "the Firefox test drives Firefox from node: apt-get install nodejs"
    assert (EXTENSION / "node_modules" / "puppeteer-core").is_dir(), \
        "the Firefox test needs puppeteer-core: npm ci --prefix extension (tests/run.sh runs it)"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    home = tmp_path_factory.mktemp("chorus-firefox-home")
    write_config(home, {"server": {"allowed_origins": [ORIGIN]}, "amq": {"readers": {"chorus": ["*"]}}})
    server = start_server(home, ("kite", "wren", "chorus"),
                          clean_env(home, PERSMEM_DISABLE_PLUGINS="memory_hnsw,shell,git,searxng,dashboard"))
    pool = ThreadPoolExecutor(4)

    def call_tool(tool, args, agent):  # the mock's handler threads and the tests share one pool, as in Chromium's
        return pool.submit(server.call_tool, tool, args, agent=agent).result(timeout=60)

    mock = MockChat(server, call_tool)
    driver = Driver({"firefox": FIREFOX, "extension": str(built_extension("firefox")), "uuid": UUID,
                     "artifacts": str(ARTIFACTS)}, ARTIFACTS / "firefox-driver.log")
    try:
        ready = driver.receive(timeout=60)
        assert "ready" in ready, f"the Firefox driver could not start: {ready.get('error')}; log: {driver.log_tail()}"
        yield driver, ready["ready"], server, mock, call_tool
    finally:
        driver.close()
        mock.stop()
        server.stop()
        pool.shutdown()


def run_loop(chorus, name, *, rounds, surface="sidebar", kite="", wren="", server_url=None, quiet=600, ceiling=20000,
             timeout=60):
    """One exchange fired from the Chorus page: (log lines, {agent: state}, elapsed seconds)."""
    driver, _, server, mock, call_tool = chorus
    drain(call_tool)
    for prompts in mock.prompts.values():
        prompts.clear()
    result = driver.send({"name": name, "surface": surface, "serverUrl": server_url or server.url.removesuffix("/mcp"),
                          "token": server.tokens["chorus"], "mockUrl": mock.url, "rounds": rounds, "kite": kite,
                          "wren": wren, "quiet": quiet, "ceiling": ceiling, "message": MESSAGE,
                          "timeoutMs": timeout * 1000}, timeout=timeout + 30)
    assert "error" not in result, f"{result['error']}\ndriver log: {driver.log_tail()}"
    assert all(Path(path).stat().st_size > 0 for path in result["screenshots"])
    return result["log"], result["states"], result["elapsedMs"] / 1000


def test_the_sidebar_opens_at_install_with_its_host_permissions_and_apis(chorus):
    _, ready, _, _, _ = chorus
    sidebar = ready["sidebar"]
    assert ready["browser"].startswith("Firefox/") or "firefox" in ready["browser"].lower()
    assert sidebar["inSidebar"] and sidebar["origin"] == ORIGIN
    # Firefox grants an MV3 add-on's host_permissions when it is installed (temporarily, as here, or from a file),
    # so the mock pages' origin needs no permission prompt.
    assert "http://127.0.0.1/*" in sidebar["permissions"]["origins"]
    assert {"tabs", "scripting", "storage"} <= set(sidebar["permissions"]["permissions"])
    assert set(sidebar["apis"].values()) == {"function"}, sidebar["apis"]  # the chrome.* namespace, as in Chromium


def test_full_exchange_flows_through_amq_and_stops_early_when_inboxes_are_empty(chorus):
    _, _, _, mock, call_tool = chorus
    log, states, _ = run_loop(chorus, "full", rounds=5)
    assert mock.prompts["kite"][0].startswith(f"[CHORUS] {MESSAGE}")
    assert mock.prompts["wren"][0].startswith(f"[CHORUS] {MESSAGE}")
    assert [p.split("]")[0] for p in mock.prompts["kite"]] == ["[CHORUS", "[AMQ-CHECK", "[AMQ-CHECK", "[AMQ-CHECK"]
    assert log[-1].startswith("finished") and "stopped early before round 4: no agent has unread mail" in log[-1]
    assert any("(server)" in line for line in log)  # the unread counts came from the server: the origin is allowed
    history = call_tool("amq_history", {"agent": "wren", "limit": 50}, "wren")["messages"]
    subjects = [m["subject"] for m in history if m["from"] == "kite"]
    assert f"Chorus: {MESSAGE}" in subjects and f"Re: Re: Chorus: {MESSAGE}" in subjects
    assert states == {"kite": "done", "wren": "done"}


def test_runs_exactly_the_configured_rounds_from_the_page_in_a_tab(chorus):
    _, _, _, mock, _ = chorus
    log, states, _ = run_loop(chorus, "rounds-in-tab", rounds=1, surface="tab", wren="variant=changed")
    assert "all 1 rounds done" in log[-1]
    assert len(mock.prompts["wren"]) == 2 and mock.prompts["wren"][1].startswith("[AMQ-CHECK]")
    assert states == {"kite": "done", "wren": "done"}


def test_without_the_server_the_loop_falls_back_to_page_text(chorus):
    log, _, _ = run_loop(chorus, "no-server", rounds=6, server_url=f"http://127.0.0.1:{free_port()}")
    assert any("(page text)" in line for line in log)
    assert 'every reply said "No new AMQ messages"' in log[-1] and "before round 5" in log[-1]


def test_completion_waits_for_a_slow_streaming_reply_and_the_ceiling_stops_a_hung_one(chorus):
    log, states, elapsed = run_loop(chorus, "slow-and-hung", rounds=0, kite="pause=2500", wren="hang=1",
                                    quiet=800, ceiling=6000)
    assert states == {"kite": "done", "wren": "timed out"}
    assert any("kite: done" in line and "wren: timed out" in line for line in log)
    assert 6 <= elapsed < 30


def test_the_token_never_reaches_the_chat_pages(chorus):
    _, _, server, mock, _ = chorus
    token = server.tokens["chorus"]
    assert all(token not in prompt for prompts in mock.prompts.values() for prompt in prompts)
    assert token not in server.log()
