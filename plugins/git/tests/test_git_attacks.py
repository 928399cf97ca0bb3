"""Attacks through git_op with nothing but an agent's ordinary tool calls (issue 13), each refused, on real
repositories through a real server. Grouped by attack class; every test fails on the code before the fix.
"""

import http.server
import threading
from pathlib import Path

import pytest

from persmem_core.sdk.testing import ToolCallError

from gitfixtures import git


def evil_filter(repo, marker):
    """A filter driver that would write `marker` (as the server's user) whenever git cleans a file."""
    git("config", "filter.evil.clean", f"sh -c 'id > {marker}; cat'", cwd=repo)


def tracked_file_with_filter(repo):
    (repo / ".gitattributes").write_text("* filter=evil\n")
    (repo / "f.txt").write_text("data\n")


# -- code execution through config files the vetting never read -----------------------------------------

def test_commondir_pointing_at_another_repository_runs_nothing(op, roots):
    outside = roots / "other" / "filtered"
    git("init", "-q", str(outside))
    marker = roots / "pwned-commondir"
    evil_filter(outside, marker)
    victim = roots / "ws" / "worktree-victim"
    git("init", "-q", str(victim))
    tracked_file_with_filter(victim)
    (victim / ".git" / "commondir").write_text(str(outside / ".git") + "\n")
    for operation, args in (("add", "f.txt"), ("status", ""), ("branch", "evil"), ("log", "")):
        with pytest.raises(ToolCallError, match="commondir points to .*outside the git roots"):
            op(operation, victim.name, args)
    assert not marker.exists()
    assert "evil" not in git("branch", "--list", cwd=outside)  # no branch made in the outside repository


def test_commondir_inside_the_roots_is_vetted_like_the_repository(op, roots):
    shared = roots / "ws" / "shared-common"
    git("init", "-q", str(shared))
    marker = roots / "pwned-commondir-inside"
    evil_filter(shared, marker)
    victim = roots / "ws" / "worktree-inside"
    git("init", "-q", str(victim))
    tracked_file_with_filter(victim)
    (victim / ".git" / "commondir").write_text("../../shared-common/.git\n")
    with pytest.raises(ToolCallError, match="sets filter.evil.clean"):
        op("add", victim.name, "f.txt")
    assert not marker.exists()


def test_a_worktree_config_is_vetted(op, roots):
    repo = roots / "ws" / "wtconfig"
    git("init", "-q", str(repo))
    tracked_file_with_filter(repo)
    marker = roots / "pwned-worktree-config"
    git("config", "extensions.worktreeConfig", "true", cwd=repo)
    git("config", "--worktree", "filter.evil.clean", f"sh -c 'id > {marker}; cat'", cwd=repo)
    with pytest.raises(ToolCallError, match=r"config\.worktree\) sets filter.evil.clean"):
        op("add", repo.name, "f.txt")
    assert not marker.exists()


def _parent_with_nested(roots, name, marker):
    """A parent repository that tracks an embedded repository whose own config runs a filter; its
    .gitmodules asks git to look inside it (ignore = none overrides diff.ignoreSubmodules)."""
    parent = roots / "ws" / name
    git("init", "-q", str(parent))
    nested = parent / "nested"
    git("init", "-q", str(nested))
    tracked_file_with_filter(nested)
    git("add", "f.txt", ".gitattributes", cwd=nested)
    git("commit", "-q", "-m", "nested", cwd=nested)
    evil_filter(nested, marker)
    (parent / "a.txt").write_text("a\n")
    git("add", "a.txt", "nested", cwd=parent)
    (parent / ".gitmodules").write_text('[submodule "nested"]\n\tpath = nested\n\turl = ./nested\n\tignore = none\n')
    git("commit", "-q", "-m", "parent", cwd=parent)
    (nested / "f.txt").touch()  # stat data changed: git would re-read (clean) the file to compare
    return parent


@pytest.mark.parametrize("operation,args", [("status", ""), ("diff", ""), ("add", "-A"), ("commit", "-a -m x")])
def test_a_nested_repository_is_vetted_before_git_can_enter_it(op, roots, operation, args):
    marker = roots / f"pwned-nested-{operation}"
    parent = _parent_with_nested(roots, f"nest-{operation}", marker)
    with pytest.raises(ToolCallError, match="nested repository nested .*sets filter.evil.clean"):
        op(operation, parent.name, args)
    assert not marker.exists()


def test_a_clean_nested_repository_is_left_alone(op, roots):
    parent = roots / "ws" / "nest-clean"
    git("init", "-q", str(parent))
    nested = parent / "lib"
    git("init", "-q", str(nested))
    (nested / "x.txt").write_text("x\n")
    git("add", "x.txt", cwd=nested)
    git("commit", "-q", "-m", "lib", cwd=nested)
    git("add", "lib", cwd=parent)
    git("commit", "-q", "-m", "with lib", cwd=parent)
    (nested / "x.txt").write_text("changed inside the submodule\n")
    status = op("status", parent.name, "--porcelain")["stdout"]
    assert status == ""  # submodules are never entered, so their changes do not show


@pytest.mark.parametrize("key,value", [
    ("core.excludesFile", "/etc/passwd"),
    ("blame.ignoreRevsFile", "../../other/revs"),
    ("mailmap.file", "/etc/shadow"),
    ("http.cookieFile", "/root/cookies.txt"),
])
def test_config_keys_naming_files_outside_the_roots_are_refused(op, roots, key, value):
    repo = roots / "ws" / f"pathkey-{key.split('.')[1].lower()}"
    git("init", "-q", str(repo))
    git("config", key, value, cwd=repo)
    with pytest.raises(ToolCallError, match=f"(?i)sets {key} .*outside the git roots"):
        op("log", repo.name)


def test_config_keys_naming_files_inside_the_repository_are_fine(op, roots):
    repo = roots / "ws" / "pathkey-inside"
    git("init", "-q", str(repo))
    git("config", "blame.ignoreRevsFile", ".git-blame-ignore-revs", cwd=repo)
    assert op("status", repo.name)["returncode"] == 0


def test_a_repository_holding_the_data_folder_is_refused(tmp_path, persmem_server):
    base = tmp_path / "dotfiles"
    git("init", "-q", str(base))
    home = base / ".persmem"  # the data folder inside a repository's work tree: `add -A` would commit the tokens
    server = persmem_server(agents=["kite"], config={"workspace": {"roots": [str(base)]}},
                            env={"PERSMEM_HOME": str(home),
                                 "PERSMEM_DISABLE_PLUGINS": "memory_hnsw,amq_maildir,shell,searxng,dashboard"})
    for operation, args in (("add", "-A"), ("status", "")):
        with pytest.raises(ToolCallError, match="holds or is inside persmem's own data"):
            server.call_tool("git_op", {"operation": operation, "repo_path": str(base), "args": args}, agent="kite")
    assert git("status", "--porcelain", cwd=base).strip() == "?? .persmem/"  # nothing staged


# -- reading another repository through alternates -------------------------------------------------------

def test_alternates_pointing_outside_are_refused(op, roots):
    outside = roots / "other" / "private"
    git("init", "-q", str(outside))
    (outside / "secret.txt").write_text("outside secret\n")
    git("add", "secret.txt", cwd=outside)
    git("commit", "-q", "-m", "secret", cwd=outside)
    blob = git("rev-parse", "HEAD:secret.txt", cwd=outside).strip()
    victim = roots / "ws" / "borrower"
    git("init", "-q", str(victim))
    (victim / ".git" / "objects" / "info" / "alternates").write_text(str(outside / ".git" / "objects") + "\n")
    with pytest.raises(ToolCallError, match="alternates points to .*outside the git roots"):
        op("show", victim.name, blob)


def test_chained_alternates_are_followed(op, roots):
    outside = roots / "other" / "chain-end"
    git("init", "-q", str(outside))
    middle = roots / "ws" / "chain-middle"
    git("init", "-q", str(middle))
    (middle / ".git" / "objects" / "info" / "alternates").write_text(str(outside / ".git" / "objects") + "\n")
    victim = roots / "ws" / "chain-start"
    git("init", "-q", str(victim))
    (victim / ".git" / "objects" / "info" / "alternates").write_text("../../../chain-middle/.git/objects\n")
    with pytest.raises(ToolCallError, match="chain-middle/.git/objects/info/alternates points to"):
        op("log", victim.name)


# -- leaving the allowed remotes -------------------------------------------------------------------------

def _seeded_remote(roots, name):
    bare = roots / "remotes" / f"{name}.git"
    git("init", "-q", "--bare", "-b", "main", str(bare))
    seed = roots / "other" / f"seed-{name}"
    git("clone", "-q", str(bare), str(seed))
    (seed / "x.txt").write_text("x\n")
    git("add", "x.txt", cwd=seed)
    git("commit", "-q", "-m", "seed", cwd=seed)
    git("push", "-q", "origin", "HEAD:main", cwd=seed)
    return bare, seed


CLIMBS = ["{remotes}/../other/{seed}", "{remotes}/%2e%2e/other/{seed}", "{remotes}/%2E%2E/other/{seed}",
          "{remotes}/x/../../other/{seed}", "{remotes}/%252e%252e/other/{seed}", "{remotes}-evil/x"]


@pytest.mark.parametrize("escape", CLIMBS)
def test_clone_urls_cannot_climb_out_of_an_allowed_prefix(op, roots, escape):
    # Each escape gets its own remote by its place in the list: the workspace is shared by the
    # module, and names from hash() could collide between two escapes (that failed a CI run).
    name = f"climb{CLIMBS.index(escape)}"
    _, seed = _seeded_remote(roots, name)
    url = escape.format(remotes=roots / "remotes", seed=seed.name)
    with pytest.raises(ToolCallError, match="not an allowed remote|percent-encoded twice"):
        op("clone", f"climbed-{name}", clone_url=url)


def test_a_configured_remote_with_dot_segments_is_refused(op, roots):
    bare, seed = _seeded_remote(roots, "dots")
    op("clone", "dots-clone", clone_url=str(bare))
    clone = roots / "ws" / "dots-clone"
    git("remote", "set-url", "origin", f"{roots / 'remotes'}/../other/{seed.name}", cwd=clone)
    with pytest.raises(ToolCallError, match="is not allowed"):
        op("fetch", "dots-clone", "origin")


def test_a_branch_whose_remote_is_a_path_is_refused(op, roots):
    bare, seed = _seeded_remote(roots, "branchremote")
    op("clone", "branchremote-clone", clone_url=str(bare))
    clone = roots / "ws" / "branchremote-clone"
    git("config", "branch.main.remote", str(seed), cwd=clone)  # pull would fetch from here, not from origin
    with pytest.raises(ToolCallError, match="branch.main.remote .*not one of its remotes"):
        op("pull", "branchremote-clone", "--ff-only")


class _Redirector(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 - the http.server API
        self.hits.append(self.path)
        if self.path.startswith("/allowed/"):
            self.send_response(302)
            self.send_header("Location", self.path.replace("/allowed/", "/elsewhere/", 1))
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


def test_http_redirects_out_of_the_allowed_prefix_are_not_followed(tmp_path, persmem_server):
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirector)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{web.server_address[1]}"
    (tmp_path / "ws").mkdir()
    server = persmem_server(agents=["kite"], config={"workspace": {"roots": [str(tmp_path / "ws")]},
                                                     "git": {"remotes": [f"{base}/allowed/"]}},
                            env={"PERSMEM_DISABLE_PLUGINS": "memory_hnsw,amq_maildir,shell,searxng,dashboard"})
    try:
        with pytest.raises(ToolCallError, match="git clone failed"):
            server.call_tool("git_op", {"operation": "clone", "repo_path": "r", "clone_url": f"{base}/allowed/r.git"},
                             agent="kite")
    finally:
        web.shutdown()
    assert any(hit.startswith("/allowed/") for hit in _Redirector.hits)
    assert not any(hit.startswith("/elsewhere/") for hit in _Redirector.hits)


# -- limits ----------------------------------------------------------------------------------------------

def test_huge_output_is_cut_not_an_error(op, roots):
    repo = roots / "ws" / "big-log"
    git("init", "-q", str(repo))
    (repo / "big.txt").write_text("line\n" * 200_000)
    git("add", "big.txt", cwd=repo)
    git("commit", "-q", "-m", "big", cwd=repo)
    result = op("show", repo.name, "HEAD")
    assert result["truncated"] and len(result["stdout"]) <= 512_000 and "narrow it" in result["note"]


# -- ordinary work that the vetting must not refuse ------------------------------------------------------

def test_a_checked_out_submodule_is_vetted_and_accepted(op, roots):
    bare, _ = _seeded_remote(roots, "sublib")
    parent = roots / "ws" / "with-submodule"
    git("init", "-q", str(parent))
    git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(bare), "lib", cwd=parent)
    git("commit", "-q", "-m", "add lib", cwd=parent)
    assert "worktree = " in (parent / ".git" / "modules" / "lib" / "config").read_text()
    assert "add lib" in op("log", parent.name, "--oneline")["stdout"]
    assert op("status", parent.name, "--porcelain")["stdout"] == ""


def test_fetch_without_a_remote_name_checks_only_the_remote_git_would_use(op, roots):
    bare, seed = _seeded_remote(roots, "onlyused")
    op("clone", "onlyused-clone", clone_url=str(bare))
    clone = roots / "ws" / "onlyused-clone"
    git("remote", "add", "mirror", "https://elsewhere.example/x.git", cwd=clone)  # never used by a plain pull
    assert op("pull", "onlyused-clone", "--ff-only")["returncode"] == 0
    with pytest.raises(ToolCallError, match="is not allowed"):
        op("fetch", "onlyused-clone", "--all")
    git("config", "branch.main.remote", ".", cwd=clone)  # tracking a local branch: allowed, no network
    git("config", "branch.main.merge", "refs/heads/main", cwd=clone)
    assert op("pull", "onlyused-clone", "--ff-only")["returncode"] == 0


def test_the_vetting_reads_with_the_same_hardening_as_the_operation(roots):
    """Between vetting the config and reading the index, a command in the shell sandbox could rewrite
    .git/config; the vetting's own git (ls-files reads the index, which starts core.fsmonitor) must then run
    nothing either."""
    from persmem_git.runner import git_env, reader

    repo = roots / "ws" / "raced"
    git("init", "-q", str(repo))
    (repo / "a.txt").write_text("a\n")
    git("add", "a.txt", cwd=repo)
    marker = roots / "pwned-vetting-fsmonitor"
    git("config", "core.fsmonitor", f"sh -c 'id > {marker}'", cwd=repo)  # as if written in the race window
    read = reader(git_env(roots / "ws", "kite", {}, "https"), None, 20)
    code, out, _ = read(["ls-files", "--stage", "-z"], repo, repo / ".git")
    assert code == 0 and b"a.txt" in out and not marker.exists()


@pytest.mark.parametrize("url, ssh", [("git@github.com:me/x.git", True), ("ssh://host/x.git", True),
                                      ("git+ssh://host/x.git", True), ("https://host/x.git", False),
                                      ("/srv/remotes/x.git", False), ("file:///srv/x.git", False),
                                      ("./relative.git", False)])
def test_git_sees_the_server_users_ssh_folder_only_for_an_ssh_remote(url, ssh):
    """~/.ssh holds the server user's keys: git's sandbox shows it (read-only) only when git will speak ssh."""
    from persmem_core.sdk import bubblewrap
    from persmem_git.config import GitConfig
    from persmem_git.remotes import is_ssh
    from persmem_git.tools import _confinement, _ssh_folder

    assert is_ssh(url) is ssh
    if bubblewrap.support().level == "none":
        pytest.skip(f"no OS sandbox: {bubblewrap.problem()}")
    for network, urls in ((True, [url]), (False, [url]), (True, [])):
        confinement = _confinement(GitConfig(remotes=["https://host/"]), [Path("/tmp")], [], network, urls=urls)
        assert (_ssh_folder() in confinement.read_only) is (ssh and network and bool(urls)), (network, urls)
