"""Attacks through shell_exec and the file tools with nothing but an agent's ordinary tool calls (issue 13),
each refused, through a real server. Grouped by attack class; each test fails on the code before the fix.
"""

import os
import stat
import subprocess
import sys
import time

import anyio
import pytest

from persmem_core.sdk import bubblewrap
from persmem_core.sdk.testing import ToolCallError, clean_env, start_server, tool_result, write_config

needs_bwrap = pytest.mark.skipif(bubblewrap.problem() is not None, reason=f"no OS sandbox: {bubblewrap.problem()}")
ONLY_SHELL = "memory_hnsw,amq_maildir,git,searxng,dashboard"


def start(tmp_path_factory, name, shell, roots, plugins_off=ONLY_SHELL, agents=("kite",), home=None):
    home = home or tmp_path_factory.mktemp(name)
    write_config(home, {"workspace": {"roots": roots}, "shell": shell})
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS=plugins_off, PERSMEM_TEST_SECRET="server-secret-value")
    return start_server(home, agents, env)


@pytest.fixture(scope="module")
def wide_open(tmp_path_factory, ws):
    """A server whose allowlist is opened wide on purpose (a shell, python without limits): only the OS
    sandbox stands between a command and the rest of the machine."""
    allow = {name: {} for name in ("sh", "cat", "ls", "python3", "sort", "echo")}
    server = start(tmp_path_factory, "widehome", {"allow": allow, "tmp_max_bytes": 8_000_000}, [str(ws)])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def unsandboxed(tmp_path_factory, ws):
    server = start(tmp_path_factory, "offhome", {"sandbox": "off", "extra_allow": {"python3": {}}}, [str(ws)])
    yield server
    server.stop()


def run(server, command, **args):
    return server.call_tool("shell_exec", {"command": command, **args}, agent="kite")


# -- options that make a program open files named inside another file -----------------------------------

@pytest.fixture(scope="module")
def name_lists(ws):
    secret = str(ws.parent / "outside" / "secret.txt")
    (ws / "list0").write_bytes(secret.encode() + b"\0")
    (ws / "list.txt").write_text(secret + "\n")
    digest = subprocess.run(["sha256sum", secret], capture_output=True, text=True).stdout
    (ws / "sums.txt").write_text(digest)
    return secret


@pytest.mark.parametrize("command", [
    "sort --files0-from=list0", "sort --files0=list0", "wc --files0-from list0", "du --files0-from=list0",
    "find . -files0-from list0", "file -f list.txt", "file --files-from=list.txt", "sha256sum -c sums.txt",
    "md5sum --check sums.txt", "sha256sum -wc sums.txt"])
def test_names_read_from_a_file_are_refused(call, name_lists, command):
    with pytest.raises(ToolCallError, match="open files named inside another file"):
        call("shell_exec", command=command)


def test_names_read_from_a_file_are_refused_whatever_the_allowlist_says(wide_open, name_lists):
    with pytest.raises(ToolCallError, match="open files named inside another file"):
        run(wide_open, "sort --files0-from=list0")


# -- links and paths that lead out ----------------------------------------------------------------------

def test_diff_never_follows_a_link_out_of_the_workspace(call, ws):
    (ws / "tree-a").mkdir()
    (ws / "tree-a" / "x").write_text("TOP\n")
    (ws / "tree-b").mkdir()
    os.symlink(ws.parent / "outside" / "secret.txt", ws / "tree-b" / "x")  # as if it came in with a clone
    result = call("shell_exec", command="diff -r tree-a tree-b")
    assert "TOP SECRET" not in result["stdout"] + result["stderr"]
    assert "symbolic link" in result["stdout"].lower()


def test_a_new_file_under_a_linked_folder_is_refused(call, ws):
    os.symlink(ws.parent / "outside", ws / "out-link")
    with pytest.raises(ToolCallError, match="outside the workspace"):
        call("shell_exec", command="uniq notes.txt out-link/planted.txt")
    assert not (ws.parent / "outside" / "planted.txt").exists()


def test_a_folder_swapped_for_a_link_after_the_check_is_not_followed(server, ws):
    """A race: `d` flips between a real folder and a link out of the workspace (as a checkout of two
    branches would) while file_write and file_read go through it. The check sees a folder; the open must not
    then follow a link."""
    import threading

    outside = ws.parent / "outside"
    race = ws / "race"
    race.mkdir()
    (race / "real").mkdir()
    (race / "real" / "secret.txt").write_text("inside\n")
    os.symlink(outside, race / "link")
    stop = threading.Event()

    flips = []

    def flip():
        while not stop.is_set():
            for source in ("real", "link"):
                os.rename(race / source, race / "d")
                time.sleep(0.0005)
                os.rename(race / "d", race / source)
                flips.append(source)

    async def hammer():
        outcomes = []
        async with server.client("kite") as client:
            for i in range(150):
                outcomes.append(await client.call_tool("file_write", {"path": "race/d/x.txt", "content": f"{i}\n",
                                                                      "mkdir": False}))
                outcomes.append(await client.call_tool("file_read", {"path": "race/d/secret.txt"}))
        return outcomes

    flipper = threading.Thread(target=flip, daemon=True)
    flipper.start()
    try:
        outcomes = anyio.run(hammer)
    finally:
        stop.set()
        flipper.join()
    assert not (outside / "x.txt").exists() and len(flips) > 100  # the flipping went on all along
    for outcome in outcomes:
        text = outcome.content[0].text
        assert "TOP SECRET" not in text and "internal error" not in text, text


def test_an_option_value_naming_a_link_out_is_refused(call, ws):
    os.symlink(ws.parent / "outside" / "secret.txt", ws / "patterns")
    try:
        with pytest.raises(ToolCallError, match="outside the workspace"):
            call("shell_exec", command="grep --file=patterns notes.txt")
    finally:
        (ws / "patterns").unlink()


def test_a_root_of_slash_is_refused(tmp_path_factory):
    server = start(tmp_path_factory, "slashhome", {}, ["/"])
    try:
        with pytest.raises(ToolCallError, match="roots contains / "):
            server.call_tool("shell_exec", {"command": "ls"}, agent="kite")
    finally:
        server.stop()


def test_ls_cannot_follow_links_while_listing(call):
    with pytest.raises(ToolCallError, match="denies -L"):
        call("shell_exec", command="ls -RL .")


# -- devices and FIFOs ----------------------------------------------------------------------------------

def test_a_fifo_in_the_workspace_is_refused_not_waited_on(call, ws):
    os.mkfifo(ws / "pipe")
    start_time = time.monotonic()
    with pytest.raises(ToolCallError, match="device, FIFO or socket"):
        call("shell_exec", command="cat pipe", timeout=20)
    assert time.monotonic() - start_time < 10


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_in_the_workspace_is_refused(call, ws):
    os.mknod(ws / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    with pytest.raises(ToolCallError, match="device, FIFO or socket"):
        call("shell_exec", command="wc -c zero", timeout=20)


# -- temporary files ------------------------------------------------------------------------------------

FILL_TMP = """import os, sys, time
path = os.path.join(os.environ["TMPDIR"], "persmem-fill-" + sys.argv[1])
open("tmpdir-" + sys.argv[1], "w").write(os.environ["TMPDIR"])
try:
    with open(path, "wb") as f:
        for _ in range(int(sys.argv[2])):
            f.write(b"x" * 1_000_000)
            f.flush()
    print("wrote all")
except OSError as exc:
    print("refused:", exc.strerror)
sys.stdout.flush()
time.sleep(30)
"""


@needs_bwrap
def test_temporary_files_are_private_bounded_and_gone_after_a_kill(wide_open, ws):
    (ws / "fill.py").write_text(FILL_TMP)
    result = run(wide_open, "python3 fill.py boxed 20", timeout=3)
    assert result["timed_out"] and result["stdout"].startswith("refused: No space left")  # tmp_max_bytes 8 MB
    assert (ws / "tmpdir-boxed").read_text() == "/tmp"
    assert not any(name.startswith("persmem-fill-") for name in os.listdir("/tmp"))  # never on the host's /tmp
    assert not (wide_open.home / "shell" / "tmp").exists() or not any((wide_open.home / "shell" / "tmp").iterdir())


def test_without_the_sandbox_temporary_files_are_private_and_removed_after_a_kill(unsandboxed, ws):
    (ws / "fill.py").write_text(FILL_TMP)
    result = run(unsandboxed, "python3 fill.py plain 5", timeout=3)
    assert result["timed_out"] and result["stdout"].startswith("wrote all") and not result["sandboxed"]
    tmp_folder = unsandboxed.home / "shell" / "tmp"  # the plugin's own: no agent can plant a link there
    assert (ws / "tmpdir-plain").read_text().startswith(str(tmp_folder) + "/")
    assert list(tmp_folder.iterdir()) == []  # removed when the command was killed


# -- the OS sandbox alone, with the allowlist opened wide ----------------------------------------------

@needs_bwrap
@pytest.mark.parametrize("target", ["outside", "home", "proc", "shadow", "root"])
def test_the_sandbox_alone_keeps_a_shell_from_reading_outside(wide_open, ws, target):
    path = {"outside": ws.parent / "outside" / "secret.txt", "home": wide_open.home / "agents.json",
            "proc": f"/proc/{wide_open.process.pid}/environ", "shadow": "/etc/shadow", "root": "/root"}[target]
    result = run(wide_open, f"sh -c 'cat {path} || ls -la {path}'")
    assert result["sandboxed"] and result["returncode"] != 0, result
    out = result["stdout"]
    assert "TOP SECRET" not in out and "token_sha256" not in out and "server-secret-value" not in out
    assert "root:" not in out


@needs_bwrap
def test_the_sandbox_alone_keeps_a_shell_from_writing_outside_or_using_the_network(wide_open, ws):
    planted = ws.parent / "outside" / "planted-by-sh"
    result = run(wide_open, f"sh -c 'echo x > {planted}'")
    assert result["returncode"] != 0 and not planted.exists()
    connect = f"import socket; socket.create_connection(('127.0.0.1', {wide_open.port}), timeout=3)"
    result = run(wide_open, f"python3 -c \"{connect}\"")
    assert result["returncode"] != 0 and ("Connection refused" in result["stderr"]  # a network of its own:
                                          or "unreachable" in result["stderr"])    # the server is not on it
    inside = run(wide_open, "sh -c 'cat notes.txt && echo made > made-by-sh.txt'")
    assert inside["stdout"] == "one\ntwo\nthree\n" and (ws / "made-by-sh.txt").read_text() == "made\n"


def test_a_root_that_contains_the_data_folder_still_hides_the_data(tmp_path_factory):
    base = tmp_path_factory.mktemp("rootwithdata")
    home = base / "persmem-home"
    (base / "project.txt").write_text("work\n")
    server = start(tmp_path_factory, "unused", {"allow": {"sh": {}, "cat": {}}}, [str(base)], home=home)
    try:
        for tool, args in (("file_read", {"path": str(home / "agents.json")}),
                           ("shell_exec", {"command": "cat persmem-home/agents.json"})):
            with pytest.raises(ToolCallError, match="outside the workspace"):
                server.call_tool(tool, args, agent="kite")
        if bubblewrap.problem() is None:
            hidden = server.call_tool("shell_exec", {"command": "sh -c 'cat project.txt; cat persmem-home/agents.json; "
                                                                "ls -A persmem-home; echo listed'"}, agent="kite")
            assert hidden["sandboxed"] and hidden["stdout"] == "work\nlisted\n", hidden  # ran, saw an empty folder
        assert server.call_tool("file_read", {"path": "project.txt"}, agent="kite")["content"] == "work\n"
        doctor = subprocess.run([sys.executable, "-m", "persmem_core", "doctor"], env=server.env, capture_output=True,
                                text=True, timeout=60).stdout
        assert "contains the persmem data folder" in doctor
    finally:
        server.stop()


def test_without_the_sandbox_a_workspace_holding_the_data_runs_no_command(tmp_path_factory):
    base = tmp_path_factory.mktemp("rootwithdata-off")
    home = base / "persmem-home"
    server = start(tmp_path_factory, "unused", {"sandbox": "off"}, [str(base)], home=home)
    try:
        with pytest.raises(ToolCallError, match="contains persmem's own data folder.*nothing was run"):
            server.call_tool("shell_exec", {"command": "grep -r token_sha256 ."}, agent="kite")
    finally:
        server.stop()


# -- changing a repository's git files between git_op's check and git's read -----------------------------

def test_git_folders_are_changed_only_by_git_op(call, ws):
    subprocess.run(["git", "init", "-q", str(ws / "repo")], check=True)
    (ws / "store").mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(ws / "store" / "bare")], check=True)
    (ws / "store" / "linked").mkdir()  # a linked worktree's git folder: HEAD and commondir, under any name
    (ws / "store" / "linked" / "HEAD").write_text("ref: refs/heads/main\n")
    (ws / "store" / "linked" / "commondir").write_text("../bare\n")
    evil = "[filter \"evil\"]\n\tclean = id\n"
    for path in ("repo/.git/config", "repo/.git/commondir", "store/bare/config", "repo/.git",
                 "store/linked/config.worktree"):
        with pytest.raises(ToolCallError, match="only git_op changes git's own files"):
            call("file_write", path=path, content=evil)
    with pytest.raises(ToolCallError, match="only git_op changes git's own files"):
        call("file_patch", path="repo/.git/config", old_text="[core]", new_text=evil + "[core]")
    with pytest.raises(ToolCallError, match="only git_op changes git's own files"):
        call("shell_exec", command="uniq notes.txt repo/.git/config")
    with pytest.raises(ToolCallError, match="only git_op changes git's own files"):
        call("shell_exec", command="uniq notes.txt commondir", workdir="repo/.git")
    assert "evil" not in (ws / "repo" / ".git" / "config").read_text()
    assert call("file_read", path="repo/.git/HEAD")["content"].startswith("ref: ")  # reading is fine


# -- one agent's many slow commands ---------------------------------------------------------------------

def test_one_agents_slow_commands_never_stall_other_agents(tmp_path_factory, ws):
    server = start(tmp_path_factory, "busyhome", {"extra_allow": {"sleep": {}}}, [str(ws)],
                   plugins_off="memory_hnsw,git,searxng,dashboard", agents=("kite", "wren"))

    async def flood_and_ask():
        outcomes, waited = [], {}
        async with server.client("kite") as kite, server.client("wren") as wren:
            async def slow():
                outcomes.append(await kite.call_tool("shell_exec", {"command": "sleep 3"}))

            async with anyio.create_task_group() as tg:
                for _ in range(45):
                    tg.start_soon(slow)
                await anyio.sleep(0.5)
                started = time.monotonic()
                tool_result(await wren.call_tool("amq_check", {}))
                waited["mail"] = time.monotonic() - started
                started = time.monotonic()
                tool_result(await wren.call_tool("shell_exec", {"command": "echo mine"}))
                waited["shell"] = time.monotonic() - started
        return outcomes, waited

    try:
        outcomes, waited = anyio.run(flood_and_ask)
    finally:
        server.stop()
    refused = [o for o in outcomes if o.is_error]
    assert len(refused) == 41 and len(outcomes) == 45
    assert "already have 4 calls running" in refused[0].content[0].text
    assert waited["mail"] < 1.5 and waited["shell"] < 1.5, waited


# -- inputs the kernel or the file system would refuse -------------------------------------------------

def test_an_argument_too_long_for_the_kernel_is_a_clear_error(call):
    with pytest.raises(ToolCallError, match="at most 131,072 bytes per argument"):
        call("shell_exec", command="echo " + "x" * 200_000)


@pytest.mark.parametrize("tool,args", [
    ("file_write", {"path": "n" * 300 + ".txt", "content": "x"}),
    ("file_read", {"path": "n" * 300}),
    ("file_patch", {"path": "d/" + "n" * 256, "old_text": "a"}),
    ("shell_exec", {"command": "ls", "workdir": "w" * 300}),
    ("shell_exec", {"command": "cat " + "c" * 300 + "/x"}),
    ("file_write", {"path": "/".join(["d"] * 2100), "content": "x"}),
])
def test_over_long_names_are_clear_errors(call, tool, args):
    with pytest.raises(ToolCallError, match="at most 255 bytes|limit is 4,095 bytes"):
        call(tool, **args)


def test_a_name_just_under_the_limit_can_be_written(call, ws):
    name = "n" * 250 + ".txt"
    assert call("file_write", path=name, content="long name\n")["status"] == "written"
    assert (ws / name).read_text() == "long name\n"


def test_doctor_reports_the_sandbox(server):
    out = subprocess.run([sys.executable, "-m", "persmem_core", "doctor"], env=server.env, capture_output=True,
                         text=True, timeout=60).stdout
    line = next(line for line in out.splitlines() if "shell sandbox" in line)
    assert line.startswith("PASS" if bubblewrap.problem() is None else "WARN")


def test_results_say_whether_the_command_was_sandboxed(call, unsandboxed):
    assert call("shell_exec", command="echo x")["sandboxed"] is (bubblewrap.support().level != "none")
    assert run(unsandboxed, "echo x")["sandboxed"] is False
