"""The setup text the CLI prints, used as a new user uses it: pasted into a shell or a client config, run from
a fresh venv that is not on PATH. Grouped by what each test refuses: a pasted line that runs something else,
credentials that do not work, a secret path that costs the token, next steps that do not run, raw epoch
times, and doctor inside the server calling the server's own port busy."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import anyio
import httpx2
import pytest

from persmem_core.auth.agents import AgentStore
from persmem_core.net.addresses import free_port
from persmem_core.testing import clean_env, write_config
from persmem_core.transport.server_process import RunningServer
from persmem_core.transport.tool_answers import tool_result

VENV_BIN = Path(sys.executable).parent
PERSMEM_SCRIPT = VENV_BIN / "persmem"
BARE_PATH = "/usr/bin:/bin"  # a shell after the README's install: the venv is not activated


@pytest.fixture(autouse=True)
def _run_in_tmp_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a substitution that did run would leave its PWNED file here


def run_persmem(*args: str, env: dict[str, str], path: str = BARE_PATH) -> subprocess.CompletedProcess:
    """The installed `persmem` script, started by its path as the README's user would, with `path` as PATH."""
    return subprocess.run([str(PERSMEM_SCRIPT), *args], env=env | {"PATH": path}, capture_output=True,
                          text=True, timeout=120)


def sections(text: str) -> dict[str, tuple[str, list[str]]]:
    """`connect` output as {title: (kind, lines)}: each block sits under `## title (kind)`."""
    found: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in text.splitlines():
        heading = re.fullmatch(r"## (.+) \((shell|TOML|JSON|URL|note)\)", line)
        if heading:
            current = heading.group(1)
            found[current] = (heading.group(2), [])
        elif current is not None and line.strip():
            found[current][1].append(line)
    return found


def block(found, kind: str, title_part: str) -> list[str]:
    [lines] = [lines for title, (k, lines) in found.items() if k == kind and title_part in title]
    return lines


def code_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith("#")]


def words_bash_sees(line: str, cwd: Path) -> list[str]:
    """The words bash passes to the line's command when the line is pasted into it. The command itself is
    replaced by a function printing its arguments, so nothing is installed or changed; any `$(...)`, backtick
    or `$VAR` left unquoted would run or expand here and show up as a difference from shlex's reading."""
    command = shlex.split(line)[0]
    script = f'{command}() {{ printf "%s\\0" "$@"; }}\n{line}\n'
    ran = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], cwd=cwd, capture_output=True,
                         timeout=30, env={"PATH": BARE_PATH, "HOME": str(cwd)})
    assert ran.returncode == 0, ran.stderr
    return [command, *ran.stdout.decode().split("\0")[:-1]]


def assert_paste_safe(line: str, cwd: Path) -> list[str]:
    words = shlex.split(line)
    assert words_bash_sees(line, cwd) == words, line
    return words


# -- a pasted line that runs something else ---------------------------------------------------------------------


def test_every_printed_block_parses_and_no_substitution_survives_a_hostile_home_and_url(tmp_path):
    # the old Claude Code line put `persmem agent add` in backticks inside double quotes: pasting it ran that
    home = tmp_path / "my home $(touch PWNED-home) `touch PWNED-tick` 'q' \"d\""
    env = clean_env(home)
    assert run_persmem("agent", "add", "kite", "--secret-path", env=env).returncode == 0
    url = "https://mcp.example.com/x$(touch${IFS}PWNED-url)`touch${IFS}PWNED-url2`$HOME;touch${IFS}PWNED-semi"
    printed = run_persmem("connect", "kite", "--rotate", "--url", url, env=env)
    assert printed.returncode == 0, printed.stderr
    found = sections(printed.stdout)
    store = AgentStore(home)
    shell_lines = [line for kind, lines in found.values() if kind == "shell" for line in code_lines(lines)]
    assert len(shell_lines) == 6  # then `persmem hooks install` here and two for another machine (the sessions plugin)
    remote, fetch = code_lines(block(found, "shell", "Hooks on another machine"))
    assert assert_paste_safe(remote, tmp_path) == ["persmem", "hooks", "install", "--url", url, "--agent", "kite"]
    script = f'curl() {{ printf "%s\\0" curl "$@"; }}\npython3() {{ printf "%s\\0" python3 "$@"; }}\n{fetch}\n'
    ran = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], cwd=tmp_path, capture_output=True,
                         timeout=30, env={"PATH": BARE_PATH, "HOME": str(tmp_path)})
    assert ran.stdout.decode().split("\0")[:-1] == [
        "curl", "-fsS", f"{url}/hooks/client.py", "-o", f"{tmp_path}/.persmem-hook.py",
        "python3", f"{tmp_path}/.persmem-hook.py", "install", "--url", url, "--agent", "kite"]
    [hooks_line] = code_lines(block(found, "shell", "Ambient memory"))
    assert assert_paste_safe(hooks_line, tmp_path) == [
        "env", f"PERSMEM_HOME={home}", str(PERSMEM_SCRIPT), "hooks", "install", "--target", "all", "--agent", "kite"]

    http = assert_paste_safe(block(found, "shell", "Claude Code over HTTP")[0], tmp_path)
    assert http[:6] == ["claude", "mcp", "add", "--transport", "http", "persmem"]
    assert http[6] == f"{url}/mcp" and http[7] == "--header"
    bearer = http[8].removeprefix("Authorization: Bearer ")
    assert store.agent_for_token(bearer) == "kite"

    [export] = code_lines(block(found, "shell", "Codex CLI over HTTP: the token"))
    assert assert_paste_safe(export, tmp_path) == ["export", f"PERSMEM_TOKEN={bearer}"]
    codex = tomllib.loads("\n".join(block(found, "TOML", "Codex")))
    assert codex == {"mcp_servers": {"persmem": {"url": f"{url}/mcp", "bearer_token_env_var": "PERSMEM_TOKEN"}}}

    stdio = assert_paste_safe(block(found, "shell", "Claude Code over stdio")[0], tmp_path)
    assert stdio[:6] == ["claude", "mcp", "add", "persmem", "--env", f"PERSMEM_HOME={home}"]
    assert stdio[6:] == ["--", str(PERSMEM_SCRIPT), "serve", "--transport", "stdio", "--agent", "kite"]

    desktop = json.loads("\n".join(block(found, "JSON", "Claude Desktop")))["mcpServers"]["persmem"]
    assert desktop == {"command": str(PERSMEM_SCRIPT), "args": ["serve", "--transport", "stdio", "--agent", "kite"],
                       "env": {"PERSMEM_HOME": str(home)}}

    [oauth_url] = code_lines(block(found, "URL", "with OAuth"))
    assert oauth_url == f"{url}/mcp"
    oauth_note = "\n".join(line for line in block(found, "URL", "with OAuth") if line.startswith("#"))
    assert "oauth password" in oauth_note and "oauth revoke ID" in oauth_note and "{" not in oauth_note
    [connector] = code_lines(block(found, "URL", "secret path"))
    secret = connector.removeprefix(f"{url}/").removesuffix("/mcp")
    assert store.agent_for_path_secret(secret) == "kite"
    assert not list(tmp_path.glob("PWNED*"))


def test_the_snippets_without_rotate_read_the_token_file_and_run_nothing_else(tmp_path):
    # the reported lines held `Bearer <TOKEN>`: pasted as printed they registered a fake token. Now they read the
    # token from its 0600 file (tests/test_tool_sets.py pastes them); every other line is one literal command
    env = clean_env(tmp_path / "home")
    run_persmem("agent", "add", "kite", "--secret-path", env=env)
    found = sections(run_persmem("connect", "kite", env=env).stdout)
    shell_lines = [line for kind, lines in found.values() if kind == "shell" for line in code_lines(lines)]
    assert len(shell_lines) == 6 and not any("`" in line for line in shell_lines)
    reads_token = [line for line in shell_lines if "$(cat -- " in line]
    assert len(reads_token) == 2 and "<TOKEN>" not in "\n".join(shell_lines)
    for line in shell_lines:
        if line not in reads_token and not line.startswith("curl "):
            assert_paste_safe(line, tmp_path)
    assert not list(tmp_path.glob("PWNED*"))


def test_a_url_that_is_not_http_is_refused_naming_the_fix(tmp_path):
    env = clean_env(tmp_path / "home")
    run_persmem("agent", "add", "kite", env=env)
    for bad in ("mcp.example.com", "javascript:alert(1)", "https://", "https://a b.example"):
        refused = run_persmem("connect", "kite", "--url", bad, env=env)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "--url" in refused.stderr and "https://mcp.example.com" in refused.stderr


# -- credentials that do not work -------------------------------------------------------------------------------


def test_the_printed_snippets_reach_a_real_server_as_the_agent(tmp_path):
    """Every client the text sets up, started from the text alone: Claude Desktop's stdio command, then
    Claude Code's URL and header, Codex's TOML and exported token and claude.ai's URL against `persmem serve`."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client

    home = tmp_path / "home"
    port = free_port()
    write_config(home, {"server": {"port": port}})
    env = clean_env(home)
    printed = run_persmem("connect", "kite", "--rotate", env=env)
    assert printed.returncode == 0, printed.stderr
    found = sections(printed.stdout)
    desktop = json.loads("\n".join(block(found, "JSON", "Claude Desktop")))["mcpServers"]["persmem"]

    async def whoami_over_stdio():
        params = StdioServerParameters(command=desktop["command"], args=desktop["args"],
                                       env={"PATH": BARE_PATH, **desktop["env"]})
        with open(tmp_path / "stdio.log", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                return tool_result(await client.call_tool("persmem_whoami", {}))

    assert anyio.run(whoami_over_stdio)["agent"] == "kite"

    http = shlex.split(block(found, "shell", "Claude Code over HTTP")[0])
    header = dict([http[8].split(": ", 1)])
    codex = tomllib.loads("\n".join(block(found, "TOML", "Codex")))["mcp_servers"]["persmem"]
    exported = shlex.split(code_lines(block(found, "shell", "the token"))[0])[1].split("=", 1)[1]
    [connector] = code_lines(block(found, "URL", "secret path"))
    server = RunningServer(home, env, port, tokens={}).start()
    try:
        assert http[6] == codex["url"] == server.url
        assert server_whoami(server, http[6], header) == "kite"
        assert server_whoami(server, codex["url"], {"Authorization": f"Bearer {exported}"}) == "kite"
        assert server_whoami(server, connector, {}) == "kite"
    finally:
        server.stop()


def server_whoami(server: RunningServer, url: str, headers: dict[str, str]) -> str:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def call():
        async with httpx2.AsyncClient(headers=headers, timeout=60.0) as http:
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return tool_result(await client.call_tool("persmem_whoami", {}))

    return anyio.run(call)["agent"]


def test_connect_for_an_agent_that_does_not_exist_says_how_to_create_it(tmp_path):
    refused = run_persmem("connect", "kite", env=clean_env(tmp_path / "home"))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert f"`{PERSMEM_SCRIPT} agent add kite`" in refused.stderr and "--rotate" in refused.stderr


# -- a secret path that costs the token -------------------------------------------------------------------------


def test_a_secret_path_is_added_without_rotating_the_token_and_connect_says_how(tmp_path):
    home = tmp_path / "home"
    env = clean_env(home)
    added = run_persmem("agent", "add", "kite", env=env)
    token = re.search(r"^token: (\S+)$", added.stdout, re.M).group(1)

    # no secret path yet: no URL that cannot work, but the command that issues one, which runs as printed
    before = sections(run_persmem("connect", "kite", env=env).stdout)
    assert not any(kind == "URL" and "secret path" in title for title, (kind, _) in before.items())
    [note] = block(before, "note", "secret path")
    command = re.search(r"`([^`]+ agent secret-path kite)`", note).group(1)
    issued = subprocess.run(shlex.split(command), env=env | {"PATH": BARE_PATH}, capture_output=True, text=True,
                            timeout=60)
    assert issued.returncode == 0, issued.stderr
    url = re.search(r"^claude.ai connector URL: (\S+)$", issued.stdout, re.M).group(1)
    secret = url.split("/")[-2]
    store = AgentStore(home)
    assert store.agent_for_token(token) == "kite" and store.agent_for_path_secret(secret) == "kite"

    after = sections(run_persmem("connect", "kite", env=env).stdout)
    assert code_lines(block(after, "URL", "secret path")) == ["http://127.0.0.1:8765/<SECRET-PATH>/mcp"]

    # and the other way round: a new token leaves the secret path working
    renewed = run_persmem("agent", "token", "kite", env=env)
    new_token = re.search(r"^token: (\S+)$", renewed.stdout, re.M).group(1)
    assert store.agent_for_token(token) is None and store.agent_for_token(new_token) == "kite"
    assert store.agent_for_path_secret(secret) == "kite"


def test_renewing_a_credential_of_a_missing_or_revoked_agent_is_refused_naming_the_fix(tmp_path):
    env = clean_env(tmp_path / "home")
    for command in ("secret-path", "token"):
        refused = run_persmem("agent", command, "nobody", env=env)
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "no active agent named 'nobody'" in refused.stderr and "agent add nobody" in refused.stderr
    run_persmem("agent", "add", "kite", env=env)
    run_persmem("agent", "revoke", "kite", env=env)
    assert run_persmem("agent", "secret-path", "kite", env=env).returncode == 1


# -- next steps that do not run ---------------------------------------------------------------------------------


def test_next_steps_name_a_persmem_that_runs_without_the_venv_on_path(tmp_path):
    env = clean_env(tmp_path / "home")
    added = run_persmem("agent", "add", "kite", env=env)
    command = re.search(r"^Next: `([^`]+)`", added.stdout, re.M).group(1)
    assert shlex.split(command) == [str(PERSMEM_SCRIPT), "connect", "kite"]
    ran = subprocess.run(shlex.split(command), env=env | {"PATH": BARE_PATH}, capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0 and "Claude Code" in ran.stdout, ran.stderr
    # with the venv activated (its bin on PATH) the short form is the one that runs
    on_path = run_persmem("agent", "add", "wren", env=env, path=f"{VENV_BIN}:{BARE_PATH}")
    assert "Next: `persmem connect wren`" in on_path.stdout


def test_plugin_new_prints_pip_and_pytest_of_the_python_that_runs_persmem(tmp_path):
    parent = tmp_path / "my plugins"
    parent.mkdir()
    created = run_persmem("plugin", "new", "kite_notes", "--dir", str(parent), env=clean_env(tmp_path / "home"))
    assert created.returncode == 0, created.stderr
    root = parent / "persmem-plugin-kite-notes"
    steps = [line.split("#")[0].strip() for line in created.stdout.splitlines() if line.startswith("  ")]
    pip, pytest_, plugins = (assert_paste_safe(step, tmp_path) for step in steps)
    interpreter = pip[0]
    assert Path(interpreter).is_absolute() and Path(interpreter).parent == VENV_BIN  # not a bare `pip`
    assert pip[1:] == ["-m", "pip", "install", "-e", f"{root}[test]"]
    assert pytest_ == [interpreter, "-m", "pytest", str(root)]
    assert plugins == [str(PERSMEM_SCRIPT), "plugins"]
    # each runs from a shell without the venv (pip only asked its version: installing would change the venv)
    assert subprocess.run([interpreter, "-m", "pip", "--version"], env={"PATH": BARE_PATH},
                          capture_output=True).returncode == 0
    assert subprocess.run(plugins, env=clean_env(tmp_path / "home") | {"PATH": BARE_PATH},
                          capture_output=True, timeout=120).returncode == 0


# -- raw epoch times --------------------------------------------------------------------------------------------


def test_agent_list_shows_times_as_iso_8601_utc_to_the_second(tmp_path):
    env = clean_env(tmp_path / "home")
    run_persmem("agent", "add", "kite", env=env)
    run_persmem("agent", "add", "wren", env=env)
    run_persmem("agent", "revoke", "wren", env=env)
    listed = run_persmem("agent", "list", env=env).stdout.splitlines()
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"
    assert re.fullmatch(rf"kite\tcreated {stamp}\ttoken\ttools all", listed[0]), listed  # the run lists every set
    assert re.fullmatch(rf"wren\tcreated {stamp}\trevoked {stamp}", listed[1]), listed


# -- doctor inside the server calling the server's own port busy ------------------------------------------------


def test_doctor_on_the_system_page_knows_the_port_is_the_servers_own(tmp_path):
    home = tmp_path / "home"
    port = free_port()
    write_config(home, {"server": {"port": port}})
    env = clean_env(home)
    tokens = {"kite": AgentStore(home).add("kite").token}
    server = RunningServer(home, env, port, tokens).start()
    try:
        base = f"{server.base_url}/dashboard"
        with httpx2.Client(timeout=30) as browser:
            form = browser.get(f"{base}/login")
            csrf = form.text.split('name="_csrf_token" value="', 1)[1].split('"', 1)[0]
            browser.post(f"{base}/login", data={"token": tokens["kite"], "_csrf_token": csrf})
            system = browser.get(f"{base}/system")
        assert system.status_code == 200
        rows = re.findall(r'<tr><td class="status-(\w+)">\w+</td><td>port free</td><td class="meta">([^<]*)</td>',
                          system.text)
        assert rows == [("PASS", f"127.0.0.1:{port} is this server&#39;s own address (doctor runs inside it)")]
        # the CLI's doctor is another process: the port is taken, by this home's own healthy server (a PASS;
        # tests/test_doctor_port.py has the other holders)
        outside = run_persmem("doctor", env=env)
        assert f"PASS  server port: persmem server running and healthy on 127.0.0.1:{port}" in outside.stdout
    finally:
        server.stop()

