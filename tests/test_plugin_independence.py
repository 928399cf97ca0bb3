"""Plugins never import each other and import only the SDK of the core (`persmem_core.sdk`, and in their tests
`persmem_core.sdk.testing`), and each one works alone: the server with only core + that plugin serves exactly
its tools, and the server without it keeps serving the rest."""

import ast
from pathlib import Path

import pytest

from persmem_core.testing import clean_env, start_server, write_config

ROOT = Path(__file__).parent.parent
PACKAGES = {p.parent.name: p for p in ROOT.glob("plugins/*/persmem_*/__init__.py")}
PLUGIN_TOOLS = {
    "amq_maildir": {"amq_send", "amq_check", "amq_read", "amq_history", "amq_timeline", "amq_reply", "amq_thread",
                    "amq_agents"},
    "shell": {"shell_exec", "file_read", "file_write", "file_patch", "diff_generate"},
    "git": {"git_op"},
    "searxng": {"web_search", "web_fetch"},
    "sessions": {"session_list", "session_read", "session_search"},
}


def imported_modules(package: Path) -> set[str]:
    names = set()
    for file in package.parent.rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def test_no_plugin_imports_another():
    assert len(PACKAGES) >= 5
    for name, init in PACKAGES.items():
        others = {p.parent.name for p in PACKAGES.values()} - {init.parent.name}
        assert not imported_modules(init) & others, f"{name} imports {imported_modules(init) & others}"


def core_imports(file: Path) -> set[str]:
    """Every module of persmem_core that `file` imports, as `persmem_core.x` or `persmem_core.x.name`."""
    names = set()
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names if alias.name.split(".")[0] == "persmem_core"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "persmem_core":
            names |= {node.module} if node.module != "persmem_core" else {f"persmem_core.{a.name}" for a in node.names}
    return names


def test_plugins_import_only_the_sdk_of_the_core():
    allowed_in_code, allowed_in_tests = {"persmem_core.sdk"}, {"persmem_core.sdk", "persmem_core.sdk.testing"}
    files = [f for f in ROOT.glob("plugins/*/**/*.py") if ".egg-info" not in str(f)]
    assert len(files) > 100
    for file in files:
        allowed = allowed_in_tests if "tests" in file.relative_to(ROOT).parts else allowed_in_code
        assert core_imports(file) <= allowed, (
            f"{file.relative_to(ROOT)} imports {sorted(core_imports(file) - allowed)}: a plugin imports only "
            f"persmem_core.sdk (its tests also persmem_core.sdk.testing); add what it needs to the SDK")


def test_the_sdk_costs_nothing_to_import_and_every_name_resolves():
    import subprocess
    import sys
    probe = ("import sys, persmem_core.sdk as sdk; heavy = [m for m in ('nats', 'cryptography', 'mcp', 'litestar') "
             "if m in sys.modules]; print(heavy); [getattr(sdk, n) for n in sdk.__all__]; print('ok')")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["[]", "ok"]
    with pytest.raises(AttributeError, match="only the names in persmem_core.sdk.__all__"):
        __import__("persmem_core.sdk").sdk.Host


@pytest.mark.parametrize("plugin", sorted(PLUGIN_TOOLS))
def test_each_plugin_alone_and_the_server_without_it(tmp_path, plugin):
    everyone = {"memory_hnsw", *PLUGIN_TOOLS}
    alone_home, without_home = tmp_path / "alone", tmp_path / "without"
    for home in (alone_home, without_home):  # searxng offers its tools once its URL is set
        write_config(home, {"searxng": {"url": "http://127.0.0.1:8888"}})
    alone = start_server(alone_home, ("kite",), clean_env(alone_home, PERSMEM_DISABLE_PLUGINS=",".join(everyone - {plugin})))
    try:
        assert {t.name for t in alone.list_tools(agent="kite")} == PLUGIN_TOOLS[plugin] | {"persmem_whoami"}
    finally:
        alone.stop()
    others = everyone - {plugin, "memory_hnsw"}
    without = start_server(without_home, ("kite",), clean_env(without_home, PERSMEM_DISABLE_PLUGINS=f"{plugin},memory_hnsw"))
    try:
        names = {t.name for t in without.list_tools(agent="kite")}
        assert not names & PLUGIN_TOOLS[plugin] and set().union(*(PLUGIN_TOOLS[o] for o in others)) <= names
        assert without.call_tool("persmem_whoami", {}, agent="kite")["agent"] == "kite"
    finally:
        without.stop()
