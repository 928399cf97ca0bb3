"""git_op through a real server on real repositories: security.md's git cases, each a test."""

import os
import stat

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from persmem_core.sdk.testing import ToolCallError, assert_tools_answer_clearly

from gitfixtures import git  # tests/ is on sys.path under pytest's default import mode


def test_persmem_signature(server):
    schema = {t.name: t.input_schema for t in server.list_tools(agent="kite")}["git_op"]
    assert set(schema["required"]) == {"operation", "repo_path"}
    assert schema["properties"]["args"]["default"] == "" and schema["properties"]["clone_url"]["default"] == ""


def test_init_add_commit_log_attributed_to_the_calling_agent(op, roots):
    op("init", "proj", "-b main")
    (roots / "ws" / "proj" / "README.md").write_text("# proj\n")
    op("add", "proj", "README.md")
    assert "new file:   README.md" in op("status", "proj")["stdout"]
    op("commit", "proj", "-m 'first commit'")
    (roots / "ws" / "proj" / "README.md").write_text("# proj\nmore\n")
    assert "+more" in op("diff", "proj")["stdout"]
    op("commit", "proj", "-a -m 'second, by wren'", agent="wren")
    log = op("log", "proj", "--format='%an <%ae>|%s' -n 5")["stdout"].splitlines()
    assert log == ["Wren Bird <wren@example.org>|second, by wren", "kite <kite@persmem.local>|first commit"]
    assert op("rev-parse", "proj", "--abbrev-ref HEAD")["stdout"].strip() == "main"
    op("checkout", "proj", "-b feature")
    assert "feature" in op("branch", "proj", "--list")["stdout"]
    assert "README.md" in op("show", "proj", "--stat HEAD")["stdout"]
    with pytest.raises(ToolCallError, match="commit needs a message"):
        op("commit", "proj", "--allow-empty")


@pytest.mark.parametrize("operation,args,why", [
    ("fetch", "--upload-pack=touch /tmp/x origin", "not allowed for git fetch"),
    ("fetch", "--upload-pac=touch origin", "not allowed for git fetch"),
    ("log", "--output=/tmp/pwned", "not allowed for git log"),
    ("diff", "--output=../x", "not allowed for git diff"),
    ("diff", "--no-index ../../../etc/passwd x", "not allowed for git diff"),
    ("log", "-c alias.x=!id", "not allowed for git log"),
    ("commit", "--exec=id -m x", "not allowed for git commit"),
    ("commit", "-F /etc/passwd", "not allowed for git commit"),
    ("commit", "--template=/etc/passwd -m x", "not allowed for git commit"),
    ("checkout", "--orphan=x", "not allowed for git checkout"),
    ("checkout", "-evil-ref", "not allowed for git checkout"),
    ("log", "--ext-diff -p", "not allowed for git log"),
    ("push", "--force origin main", "force push is off"),
    ("log", "-- ../../../etc/passwd", "outside the repository"),
    ("add", "../other/x", "outside the repository"),
    ("config", "core.pager id", "unknown operation"),
    ("grep", "-Oid TODO", "unknown operation"),
])
def test_dangerous_options_refs_and_paths_are_refused(op, roots, operation, args, why):
    if not (roots / "ws" / "guard" / ".git").exists():
        git("init", "-q", str(roots / "ws" / "guard"))
    with pytest.raises(ToolCallError, match=why):
        op(operation, "guard", args)
    assert not os.path.exists("/tmp/pwned") and not (roots / "x").exists()


@pytest.mark.parametrize("repo_path", ["../other", "/etc", "../ws-evil", "/", "proj/../../other"])
def test_repositories_only_under_the_root(op, roots, repo_path):
    with pytest.raises(ToolCallError, match="outside the git roots"):
        op("status", repo_path)


def test_a_dot_git_file_pointing_elsewhere_is_refused(op, roots):
    git("init", "-q", str(roots / "other" / "real"))
    (roots / "ws" / "pointer").mkdir()
    (roots / "ws" / "pointer" / ".git").write_text(f"gitdir: {roots / 'other' / 'real' / '.git'}\n")
    with pytest.raises(ToolCallError, match="outside the git roots"):
        op("log", "pointer")


def hostile_repo(path, key, value, attributes=None):
    git("init", "-q", str(path))
    (path / "f.txt").write_text("data\n")
    if attributes:
        (path / ".gitattributes").write_text(attributes)
    git("config", key, value, cwd=path)
    return path


@pytest.mark.parametrize("key,value,attributes", [
    ("core.fsmonitor", "touch {marker}", None),
    ("core.sshCommand", "touch {marker}", None),
    ("core.pager", "touch {marker}", None),
    ("filter.evil.clean", "touch {marker}", "* filter=evil\n"),
    ("diff.evil.textconv", "touch {marker}", "* diff=evil\n"),
    ("alias.st", "!touch {marker}", None),
    ("include.path", "{marker}.cfg", None),
    ("url.{marker}.insteadOf", "https://", None),
])
def test_a_hostile_repository_config_runs_nothing(op, roots, key, value, attributes):
    marker = roots / f"pwned-{key.split('.')[0]}-{key.split('.')[-1]}"
    name = f"hostile-{key.replace('.', '-').replace('/', '_')}"[:60]
    repo = hostile_repo(roots / "ws" / name, key.format(marker=marker), value.format(marker=marker), attributes)
    for operation, args in (("status", ""), ("add", "f.txt"), ("diff", "--cached"), ("log", "")):
        with pytest.raises(ToolCallError, match="persmem will not operate on it"):
            op(operation, repo.name, args)
    assert not marker.exists()


def test_hooks_never_run(op, roots):
    repo = roots / "ws" / "hooked"
    git("init", "-q", str(repo))
    marker = roots / "pwned-hook"
    for hook in ("pre-commit", "commit-msg", "post-commit", "post-checkout", "reference-transaction"):
        script = repo / ".git" / "hooks" / hook
        script.write_text(f"#!/bin/sh\ntouch {marker}\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    (repo / "a.txt").write_text("a\n")
    op("add", "hooked", "a.txt")
    op("commit", "hooked", "-m hooked")
    op("checkout", "hooked", "-b other")
    assert not marker.exists()


def test_clone_pull_push_only_to_allowed_remotes(op, roots):
    bare = roots / "remotes" / "origin.git"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    seed = roots / "other" / "seed"
    git("clone", "-q", str(bare), str(seed))
    (seed / "x.txt").write_text("x\n")
    git("add", "x.txt", cwd=seed)
    git("commit", "-q", "-m", "seed", cwd=seed)
    git("push", "-q", "origin", "HEAD:main", cwd=seed)

    op("clone", "cloned", clone_url=str(bare))
    assert (roots / "ws" / "cloned" / "x.txt").read_text() == "x\n"
    (roots / "ws" / "cloned" / "y.txt").write_text("y\n")
    op("add", "cloned", "y.txt")
    op("commit", "cloned", "-m 'add y'")
    op("push", "cloned", "origin main")
    assert "add y" in git("log", "--oneline", cwd=bare)
    op("pull", "cloned", "--ff-only")

    with pytest.raises(ToolCallError, match="not an allowed remote"):
        op("clone", "stolen", clone_url=str(seed))
    with pytest.raises(ToolCallError, match="not a URL git_op accepts"):
        op("clone", "ext", clone_url="ext::sh -c touch% /tmp/pwned-ext")
    with pytest.raises(ToolCallError, match="URLs cannot be given directly"):
        op("push", "cloned", "https://evil.example/x.git main")
    git("remote", "add", "elsewhere", str(seed), cwd=roots / "ws" / "cloned")
    with pytest.raises(ToolCallError, match="is not allowed"):
        op("push", "cloned", "elsewhere main")
    with pytest.raises(ToolCallError, match="forces the push"):
        op("push", "cloned", "origin +main")
    assert not os.path.exists("/tmp/pwned-ext")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    operation=st.sampled_from(["status", "log", "diff", "show", "add", "commit", "branch", "checkout", "push", "nope"]),
    repo_path=st.one_of(st.sampled_from(["proj", "guard", "../other", "", "/"]), st.text(max_size=60)),
    args=st.one_of(st.text(max_size=200), st.sampled_from(["--upload-pack=id", "-- ../../x", "'unclosed", "-n -1"])),
)
def test_any_arguments_give_a_result_or_a_clear_error(server, roots, operation, repo_path, args):
    assert_tools_answer_clearly(server, [
        ("git_op", {"operation": operation, "repo_path": repo_path, "args": args}),
    ], "kite")
