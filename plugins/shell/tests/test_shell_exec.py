"""shell_exec through a real server: security.md's shell cases, each a test."""

import os
import time

import pytest

from persmem_core.sdk.testing import ToolCallError


def test_persmem_signature_and_a_plain_command(server, call):
    tools = {t.name: t.input_schema for t in server.list_tools(agent="kite")}
    props = tools["shell_exec"]["properties"]
    assert tools["shell_exec"]["required"] == ["command"] and props["timeout"]["default"] == 30
    result = call("shell_exec", command="ls -1 src")
    assert result["returncode"] == 0 and result["stdout"] == "app.py\n"
    assert call("shell_exec", command="wc -l notes.txt")["stdout"].split()[0] == "3"
    assert "TODO" in call("shell_exec", command="grep -rn TODO .", workdir="src")["stdout"]


@pytest.mark.parametrize("command", [
    "echo hi; id", "echo hi | cat notes.txt", "echo $(id)", "echo `id`", "echo hi > out.txt", "echo a && id"])
def test_shell_syntax_reaches_the_program_as_plain_text(call, ws, command):
    result = call("shell_exec", command=command)
    assert result["returncode"] == 0 and "uid=" not in result["stdout"] and "one" not in result["stdout"]
    assert result["stdout"].strip() == command.split(" ", 1)[1].replace("'", "")
    assert not (ws / "out.txt").exists()


@pytest.mark.parametrize("command,rule", [
    ("find . -exec id ;", "denies -exec"),
    ("find . -execdir id ;", "denies -execdir"),
    ("find . -delete", "denies -delete"),
    ("xargs id", "not in the shell allowlist"),
    ("env LD_PRELOAD=/tmp/x.so ls", "not in the shell allowlist"),
    ("awk 'BEGIN{system(\"id\")}'", "not in the shell allowlist"),
    ("tar --checkpoint=1 --checkpoint-action=exec=id -cf /dev/null notes.txt", "not in the shell allowlist"),
    ("python3 -c 'import os; os.system(\"id\")'", "denies -c"),
    ("git -c alias.x=!id x", "not in the shell allowlist"),
    ("git grep -Oid TODO", "not in the shell allowlist"),
    ("sh -c id", "not in the shell allowlist"),
    ("sort --compress-prog=id notes.txt", "denies --compress-program"),
    ("sort -uo out notes.txt", "denies -o"),
    ("rg --pre=id TODO", "denies --pre"),
    ("grep -R TODO .", "denies -R"),
    ("/bin/ls", "by name, not a path"),
    ("./run.sh", "by name, not a path"),
])
def test_the_allowlist_judges_the_whole_argv(call, command, rule):
    with pytest.raises(ToolCallError, match=rule):
        call("shell_exec", command=command)


@pytest.mark.parametrize("command", [
    "cat /etc/passwd", "cat ../outside/secret.txt", "cat ../ws-evil/x", "ls /", "grep -r SECRET ..",
    "grep -f/etc/passwd notes.txt", "grep --file=../outside/secret.txt notes.txt", "cat ~/.ssh/id_rsa"])
def test_paths_outside_the_workspace_are_refused(call, command):
    with pytest.raises(ToolCallError, match="outside the workspace|not expanded"):
        call("shell_exec", command=command)


def test_a_symlink_in_the_workspace_pointing_out_is_refused(call, ws):
    os.symlink(ws.parent / "outside" / "secret.txt", ws / "link.txt")
    try:
        with pytest.raises(ToolCallError, match="outside the workspace"):
            call("shell_exec", command="cat link.txt")
        with pytest.raises(ToolCallError, match="outside the workspace"):
            call("shell_exec", command="ls", workdir="../outside")
    finally:
        (ws / "link.txt").unlink()


def test_the_child_gets_a_minimal_environment(call, ws):
    (ws / "env.py").write_text("import os, json; print(json.dumps(dict(os.environ)))\n")
    import json

    env = json.loads(call("shell_exec", command="python3 env.py")["stdout"])
    assert set(env) <= {"PATH", "HOME", "LANG", "LC_ALL", "TERM", "PAGER", "GIT_PAGER", "NO_COLOR", "TMPDIR", "PWD"}
    assert "PERSMEM_TEST_SECRET" not in env and "LD_PRELOAD" not in env
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin"


def test_time_limit_kills_the_process_group(call, ws):
    # The grandchild, detached in a session of its own, writes a heartbeat; once the call has returned, the
    # heartbeat must stop (its pid is not comparable: it may live in the sandbox's pid namespace).
    (ws / "spawn.py").write_text(
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True:\\n open(\"beat\", \"a\").write(\"x\")\\n"
        " time.sleep(0.05)'], start_new_session=True)\n"
        "time.sleep(30)\n")
    start = time.monotonic()
    result = call("shell_exec", command="python3 spawn.py", timeout=1.5)
    assert result["timed_out"] and time.monotonic() - start < 10
    time.sleep(0.3)
    beats = (ws / "beat").stat().st_size
    time.sleep(0.5)
    assert beats > 0 and (ws / "beat").stat().st_size == beats  # the grandchild was killed too
    (ws / "beat").unlink()
    with pytest.raises(ToolCallError, match="over the limit"):
        call("shell_exec", command="sleep 1", timeout=10_000)


def test_output_is_capped_and_the_command_stopped(call, ws):
    (ws / "big.py").write_text("import sys\nwhile True: sys.stdout.write('x' * 1000)\n")
    result = call("shell_exec", command="python3 big.py", timeout=20)
    assert result["truncated"] and len(result["stdout"]) == 4096 and not result.get("timed_out")


def test_bad_commands_get_clear_errors(call):
    with pytest.raises(ToolCallError, match="command is empty"):
        call("shell_exec", command="  ")
    with pytest.raises(ToolCallError, match="check its quotes"):
        call("shell_exec", command="echo 'unclosed")
    with pytest.raises(ToolCallError, match="'rm' is not in the shell allowlist"):
        call("shell_exec", command="rm -rf /")


def test_doctor_prints_the_workspace_and_the_effective_allowlist(server):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "persmem_core", "doctor"], env=server.env, capture_output=True,
                         text=True, timeout=60).stdout
    line = next(line for line in out.splitlines() if "shell allowlist" in line)
    assert "find -deny -exec -execdir" in line and "python3 -deny -c" in line and "sleep" in line
    assert "shell workspace" in out
