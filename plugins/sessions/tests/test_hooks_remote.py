"""The hooks for a persmem server on another machine, set up as a user does it: `persmem hooks install --url` on a
machine with persmem, and on one without, the client file fetched from the server (GET /hooks/client.py, no auth)
and run with the system's python3 to install itself. Against a real `persmem serve` (over TCP, the agent's bearer
token). Refused: a token written into a settings file or readable by others, a file the server serves that is not
the hook, a hook that cannot reach the server from its own settings line, an install that looks like success
with nowhere to install, and a silent or cryptic hook when no server runs."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import httpx2
import pytest

from persmem_core.sdk.testing import clean_env, start_server
from sessions_testkit import PLUGIN_SOURCE, plugin_env

PERSMEM = Path(sys.executable).parent / "persmem"
HOOK_FILE = PLUGIN_SOURCE / "persmem_sessions" / "hook.py"
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
HANDOFF = "Handoff for proj-remote: the ledger export is merged; next, its retry on timeouts."



@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("remote-home")
    running = start_server(home, agents=("kite",), env=clean_env(home, **plugin_env()))
    running.call_tool("memory_store", {"content": HANDOFF, "memory_type": "handoff", "project": "proj-remote"},
                      agent="kite")
    yield running
    running.stop()


def laptop(tmp_path: Path, folders=(".claude", ".codex")) -> dict[str, str]:
    """A user's machine: HOME, the clients' folders, no PERSMEM_* (and no persmem on PATH for the client)."""
    home = tmp_path / "laptop"
    for folder in folders:
        (home / folder).mkdir(parents=True)
    (tmp_path / "proj-remote").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERSMEM_")}
    return env | {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(home / ".claude"), "CODEX_HOME": str(home / ".codex"),
                  "XDG_CONFIG_HOME": str(home / ".config"), "PATH": "/usr/bin:/bin"}


def installed(env: dict[str, str], client: str, event: str) -> str:
    settings = Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json" if client == "claude" else \
        Path(env["CODEX_HOME"]) / "hooks.json"
    [command] = [h["command"] for group in json.loads(settings.read_text())["hooks"][event] for h in group["hooks"]]
    return command


def run_hook(command: str, env: dict, cwd: Path, **event) -> subprocess.CompletedProcess:
    payload = {"session_id": str(uuid.uuid4()), "cwd": str(cwd), "transcript_path": None} | event
    return subprocess.run(["bash", "-c", command], input=json.dumps(payload), env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=10)


def assert_token_kept_private(env: dict, token: str) -> Path:
    path = Path(env["XDG_CONFIG_HOME"]) / "persmem" / "hook-token-kite"
    assert path.read_text().strip() == token
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    for settings in (Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json", Path(env["CODEX_HOME"]) / "hooks.json"):
        if settings.exists():
            assert token not in settings.read_text()
    return path


def test_a_machine_without_persmem_fetches_the_client_and_installs_it_in_one_line(server, tmp_path):
    served = httpx2.get(f"{server.base_url}/hooks/client.py")  # no token: the file holds no secret
    assert served.status_code == 200 and served.headers["content-type"].startswith("text/x-python")
    assert served.content == HOOK_FILE.read_bytes()
    env = laptop(tmp_path)
    client_file = Path(env["HOME"]) / ".persmem-hook.py"
    client_file.write_bytes(served.content)

    token = server.tokens["kite"]
    done = subprocess.run([SYSTEM_PYTHON, str(client_file), "install", "--url", server.base_url + "/", "--agent",
                           "kite"], input=token + "\n", env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "accepts the token" in done.stdout
    token_file = assert_token_kept_private(env, token)

    command = installed(env, "claude", "SessionStart")
    assert command.startswith(f"{SYSTEM_PYTHON} -I -S {client_file} --client claude --url ")
    assert str(token_file) in command
    started = run_hook(command, env, tmp_path / "proj-remote", hook_event_name="SessionStart", source="startup")
    assert started.returncode == 0 and started.stderr == ""
    assert "ledger export is merged" in json.loads(started.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "codex" in installed(env, "codex", "Stop")

    again = subprocess.run([SYSTEM_PYTHON, str(client_file), "install", "--url", server.base_url, "--agent", "kite"],
                           env=env | {"PERSMEM_TOKEN": token}, capture_output=True, text=True, timeout=30)
    assert again.returncode == 0 and again.stdout.count("nothing to change") == 2 and "Codex asks" not in again.stdout

    removed = subprocess.run([SYSTEM_PYTHON, str(client_file), "uninstall"], env=env, capture_output=True, text=True,
                             timeout=30)
    assert removed.returncode == 0 and removed.stdout.count("removed the persmem hooks") == 2, removed.stderr
    assert "hooks" not in json.loads((Path(env["CLAUDE_CONFIG_DIR"]) / "settings.json").read_text())


def test_persmem_hooks_install_url_keeps_the_token_in_a_private_file_and_reaches_the_server(server, tmp_path):
    env = laptop(tmp_path) | {"PATH": os.environ["PATH"], **plugin_env()}
    token = server.tokens["kite"]
    done = subprocess.run([str(PERSMEM), "hooks", "install", "--url", server.base_url, "--agent", "kite",
                           "--target", "claude"], input=token, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    token_file = assert_token_kept_private(env, token)
    command = installed(env, "claude", "SessionEnd")
    assert " -I -S -c " in command and "--token-file" in command and str(token_file) in command

    # the hook reads the token at each run: a token file others can read is refused, loudly only with debug
    token_file.chmod(0o644)
    open_file = run_hook(command, env | {"PERSMEM_HOOK_DEBUG": "1"}, tmp_path / "proj-remote",
                         hook_event_name="SessionStart")
    assert open_file.returncode == 0 and open_file.stdout == "" and f"chmod 600 {token_file}" in open_file.stderr
    token_file.chmod(0o600)
    status = subprocess.run([str(PERSMEM), "hooks", "status"], env=env, capture_output=True, text=True, timeout=60)
    assert f"installed, to {server.base_url}" in status.stdout


def test_a_refused_token_writes_nothing(server, tmp_path):
    env = laptop(tmp_path) | {"PATH": os.environ["PATH"], **plugin_env()}
    done = subprocess.run([str(PERSMEM), "hooks", "install", "--url", server.base_url, "--agent", "kite"],
                          env=env | {"PERSMEM_TOKEN": "pm_not_a_token"}, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "refused the token" in done.stderr
    assert not list(Path(env["CLAUDE_CONFIG_DIR"]).iterdir()) and not Path(env["XDG_CONFIG_HOME"]).exists()


def test_the_client_install_with_no_client_folder_fails_naming_both(server, tmp_path):
    env = laptop(tmp_path, folders=())
    done = subprocess.run([SYSTEM_PYTHON, str(HOOK_FILE), "install", "--url", server.base_url, "--agent", "kite"],
                          input=server.tokens["kite"], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and done.stdout == ""
    assert env["CLAUDE_CONFIG_DIR"] in done.stderr and env["CODEX_HOME"] in done.stderr
    assert "--target claude" in done.stderr


def test_without_a_server_the_debug_line_says_what_happened_and_the_fix(tmp_path):
    home = tmp_path / "idle-home"
    home.mkdir(mode=0o700)
    done = subprocess.run([sys.executable, "-I", "-S", str(HOOK_FILE), "--client", "claude", "--home", str(home)],
                          input=json.dumps({"session_id": "s1", "hook_event_name": "UserPromptSubmit",
                                            "prompt": "what did we decide?"}),
                          env={"PATH": "/usr/bin:/bin", "PERSMEM_HOOK_DEBUG": "1"}, capture_output=True, text=True,
                          timeout=10)
    assert done.returncode == 0 and done.stdout == ""
    assert f"no persmem server on {home / 'persmem.sock'}: start it with `persmem serve`" in done.stderr
    assert "FileNotFoundError" not in done.stderr


def test_the_hook_starts_without_site_packages_and_without_the_slow_modules(tmp_path):
    """What keeps the hook near a bare python's start: no site (-S), and none of json (imports re), http.client
    (imports email), argparse or hashlib on its path; its JSON (over _json, json's C half) reads and writes as
    json does."""
    loaded = ("import sys;sys.path.append(sys.argv[1]);import persmem_sessions.hook;"
              "print([m for m in ('re','json','http.client','argparse','hashlib','site','email') if m in sys.modules])")
    codec = ("import sys,json;sys.path.append(sys.argv[1]);import persmem_sessions.hook as h;"
             "v={'a':[1,2.5,None,True,'\\u00e9\\n\"\\\\\\ud83d'],'b':{}};"
             "print(all(h.dumps(v,a)==json.dumps(v,ensure_ascii=a) for a in (True,False)),"
             "h.loads(h.dumps(v,False).encode('utf-8','surrogatepass'))==v)")
    for python in {sys.executable, SYSTEM_PYTHON}:
        done = subprocess.run([python, "-I", "-S", "-c", loaded, str(PLUGIN_SOURCE)], capture_output=True, text=True,
                              timeout=30)
        assert (done.returncode, done.stdout.strip()) == (0, "[]"), (python, done.stdout, done.stderr)
        done = subprocess.run([python, "-I", "-S", "-c", codec, str(PLUGIN_SOURCE)], capture_output=True, text=True,
                              timeout=30)
        assert (done.returncode, done.stdout.strip()) == (0, "True True"), (python, done.stdout, done.stderr)
