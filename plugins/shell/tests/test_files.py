"""file_read / file_write / file_patch / diff_generate through a real server: security.md's file cases."""

import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persmem_core.sdk.testing import ToolCallError, assert_tools_answer_clearly


def test_persmem_signatures(server):
    tools = {t.name: t.input_schema["properties"] for t in server.list_tools(agent="kite")}
    assert tools["file_read"]["start_line"]["default"] == 0 and tools["file_read"]["end_line"]["default"] == 0
    assert tools["file_write"]["mkdir"]["default"] is True and tools["file_patch"]["new_text"]["default"] == ""
    assert tools["diff_generate"]["context_lines"]["default"] == 3


def test_read_whole_and_line_ranges(call, ws):
    assert call("file_read", path="notes.txt")["content"] == "one\ntwo\nthree\n"
    ranged = call("file_read", path=str(ws / "notes.txt"), start_line=2, end_line=3)
    assert ranged["content"] == "two\nthree\n" and ranged["total_lines"] == 3
    assert call("file_read", path="notes.txt", start_line=3)["content"] == "three\n"


@pytest.mark.parametrize("path", [
    "../../etc/passwd", "/etc/passwd", "../outside/secret.txt", "../ws-evil/x", "src/../../outside/secret.txt",
    "notes.txt\x00.png", "~/.bashrc"])
def test_paths_outside_the_root_are_refused(call, path):
    with pytest.raises(ToolCallError, match="outside the workspace|NUL byte|not expanded"):
        call("file_read", path=path)
    with pytest.raises(ToolCallError, match="outside the workspace|NUL byte|not expanded"):
        call("file_write", path=path, content="pwned")


def test_symlinks_pointing_out_are_refused_for_read_write_and_new_files(call, ws):
    outside = ws.parent / "outside"
    os.symlink(outside / "secret.txt", ws / "secret-link")
    os.symlink(outside, ws / "outdir")
    try:
        with pytest.raises(ToolCallError, match="outside the workspace"):
            call("file_read", path="secret-link")
        with pytest.raises(ToolCallError, match="outside the workspace"):
            call("file_write", path="outdir/new.txt", content="x")  # new file under a symlinked parent
        with pytest.raises(ToolCallError, match="outside the workspace"):
            call("file_patch", path="secret-link", old_text="TOP", new_text="NOT")
        # writing to the link's name replaces the link; the target outside is untouched
        written = call("file_write", path="secret-link", content="replaced the link")
        assert written["status"] == "written" and not (ws / "secret-link").is_symlink()
        assert (outside / "secret.txt").read_text() == "TOP SECRET" and not (outside / "new.txt").exists()
    finally:
        for name in ("secret-link", "outdir"):
            if os.path.lexists(ws / name):
                os.unlink(ws / name)


def test_fifos_and_devices_are_refused_not_waited_on(call, ws):
    os.mkfifo(ws / "pipe")
    os.symlink("/dev/zero", ws / "zero")
    try:
        with pytest.raises(ToolCallError, match="FIFO"):
            call("file_read", path="pipe")
        with pytest.raises(ToolCallError, match="outside the workspace"):
            call("file_read", path="zero")
    finally:
        os.unlink(ws / "pipe")
        os.unlink(ws / "zero")


def test_write_is_atomic_keeps_mode_and_creates_folders(call, ws):
    result = call("file_write", path="deep/er/new.md", content="# hi\n")
    assert result["created"] and (ws / "deep" / "er" / "new.md").read_text() == "# hi\n"
    # the user's modes, not the 0600/0700 of persmem's own files (the server runs with umask 077)
    assert [stat.S_IMODE(p.stat().st_mode) for p in (ws / "deep", ws / "deep" / "er", ws / "deep" / "er" / "new.md")] \
        == [0o755, 0o755, 0o644]
    os.chmod(ws / "deep" / "er" / "new.md", 0o600)
    assert not call("file_write", path="deep/er/new.md", content="# again\n")["created"]
    assert stat.S_IMODE((ws / "deep" / "er" / "new.md").stat().st_mode) == 0o600
    assert not [n for n in os.listdir(ws / "deep" / "er") if n.endswith(".tmp")]
    with pytest.raises(ToolCallError, match="does not exist; pass mkdir=true"):
        call("file_write", path="nope/x.txt", content="x", mkdir=False)


def test_patch_replaces_exactly_one_occurrence(call, ws):
    (ws / "p.py").write_text("a = 1\nb = 1\nc = 2\n")
    patched = call("file_patch", path="p.py", old_text="c = 2", new_text="c = 3")
    assert patched["line"] == 3 and "+c = 3" in patched["diff"] and (ws / "p.py").read_text() == "a = 1\nb = 1\nc = 3\n"
    with pytest.raises(ToolCallError, match="appears 2 times"):
        call("file_patch", path="p.py", old_text=" = 1", new_text=" = 9")
    with pytest.raises(ToolCallError, match="not found.*closest line is: 'c = 3'"):
        call("file_patch", path="p.py", old_text="c = 4", new_text="x")
    assert (ws / "p.py").read_text() == "a = 1\nb = 1\nc = 3\n"


def test_diff_of_files_and_strings(call, ws):
    (ws / "a.txt").write_text("x\ny\n")
    (ws / "b.txt").write_text("x\nz\n")
    files = call("diff_generate", path_a="a.txt", path_b="b.txt")
    assert "-y" in files["diff"] and "+z" in files["diff"] and not files["identical"]
    against = call("diff_generate", path_a="a.txt", content_b="x\ny\n")
    assert against["identical"] and against["diff"] == ""
    strings = call("diff_generate", content_a="1\n2\n", content_b="1\n3\n", context_lines=0)
    assert strings["diff"].splitlines()[2:] == ["@@ -2 +2 @@", "-2", "+3"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.one_of(st.text(max_size=200), st.sampled_from(["..", "/", ".", "src/", "../ws", "//etc//passwd"])),
    command=st.one_of(st.text(max_size=300), st.sampled_from(["ls -R /", "find / -name x", "cat ''", "echo \x00"])),
    line=st.one_of(st.integers(-10, 10**6), st.text(max_size=3)),
)
def test_any_arguments_give_a_result_or_a_clear_error(server, ws, path, command, line):
    assert_tools_answer_clearly(server, [
        ("file_read", {"path": path, "start_line": line}),
        ("shell_exec", {"command": command, "timeout": 5}),
        ("diff_generate", {"path_a": path, "content_b": command}),
    ], "kite")
    assert (ws.parent / "outside" / "secret.txt").read_text() == "TOP SECRET"


def test_a_device_node_inside_the_workspace_is_refused(call, ws):
    try:
        os.mknod(ws / "null-dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs root")
    try:
        with pytest.raises(ToolCallError, match="a device or socket, not a regular file"):
            call("file_read", path="null-dev")
    finally:
        os.unlink(ws / "null-dev")


def test_a_shared_cache_inside_the_workspace_is_out_of_reach(tmp_path, persmem_server):
    """PERSMEM_CACHE_DIR holds files the server loads (a prepared model): no file tool or command may write or read
    there, even when a workspace root contains it."""
    ws = tmp_path / "ws"
    cache = ws / "cache"
    ws.mkdir()
    cache.mkdir(mode=0o700)
    server = persmem_server(agents=["kite"], config={"workspace": {"roots": [str(ws)]}},
                            env={"PERSMEM_CACHE_DIR": str(cache),
                                 "PERSMEM_DISABLE_PLUGINS": "memory_hnsw,amq_maildir,git,searxng,dashboard"})
    for tool, args in (("file_write", {"path": "cache/models/planted.onnx", "content": "x"}),
                       ("file_read", {"path": "cache/x"})):
        with pytest.raises(ToolCallError, match="persmem's own"):
            server.call_tool(tool, args, agent="kite")
    with pytest.raises(ToolCallError, match="points outside the workspace"):
        server.call_tool("shell_exec", {"command": "ls -a cache"}, agent="kite")
    assert not (cache / "models" / "planted.onnx").exists()
