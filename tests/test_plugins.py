"""Plugin discovery: entry points, dev modules, load failures, disabling, conflicts, lazy imports."""

import json
import subprocess
import sys
import types

import pytest

from persmem_core import hookimpl
from persmem_core.errors import PluginConflictError
from persmem_core.plugins import ENTRY_POINT_GROUP, call_each


def test_builtin_core_plugin_is_registered_through_the_entry_point(persmem_host):
    host = persmem_host()
    core = next(p for p in host.plugins if p.name == "core")
    assert core.loaded and "persmem (entry point persmem_core.builtin)" == core.source
    assert {"register_config", "register_tools", "doctor"} <= set(core.hooks)
    assert {"server", "plugins"} <= set(host.sections)


def test_broken_plugin_is_reported_and_skipped(persmem_host):
    host = persmem_host(PERSMEM_PLUGIN_MODULES="sample_broken,sample_echo")
    broken = next(p for p in host.plugins if p.name == "sample_broken")
    assert not broken.loaded and "ImportError" in broken.error
    assert "echo" in host.sections  # the others still load


def test_disable_by_env_and_by_config(persmem_host):
    host = persmem_host(PERSMEM_PLUGIN_MODULES="sample_echo", PERSMEM_DISABLE_PLUGINS="sample_echo")
    assert next(p for p in host.plugins if p.name == "sample_echo").disabled
    assert "echo" not in host.sections
    host = persmem_host(config={"plugins": {"disabled": ["sample_echo"]}}, PERSMEM_PLUGIN_MODULES="sample_echo")
    assert "echo" not in host.sections


def test_tool_name_conflict_names_both_plugins(persmem_host):
    host = persmem_host(PERSMEM_PLUGIN_MODULES="sample_echo,sample_conflict")
    with pytest.raises(PluginConflictError) as info:
        host.collect_tools()
    assert "sample_echo" in str(info.value) and "sample_conflict" in str(info.value) and "echo_say" in str(info.value)


def test_config_section_conflict_names_both_plugins(persmem_host):
    with pytest.raises(PluginConflictError, match="sample_echo.*sample_section_conflict|sample_section_conflict.*sample_echo"):
        persmem_host(PERSMEM_PLUGIN_MODULES="sample_echo,sample_section_conflict")


def test_serve_refuses_to_start_on_conflict(run_cli, sample_env):
    result = run_cli("serve", "--port", "0", env=sample_env("sample_echo,sample_conflict"))
    assert result.returncode == 1
    assert "sample_echo" in result.stderr and "sample_conflict" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("transport", ["http", "stdio"])
def test_a_plugin_whose_startup_fails_stops_the_server_naming_it(run_cli, sample_env, transport):
    result = run_cli("serve", "--transport", transport, "--port", "0", env=sample_env("sample_echo,sample_failing_startup"),
                     input="")
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "plugin 'sample_failing_startup' failed to start" in last and "/nonexistent/store" in last
    assert "PERSMEM_DISABLE_PLUGINS=sample_failing_startup" in last and "Traceback" not in result.stderr


def test_a_hook_wrapper_on_a_core_hook_is_refused_when_the_plugin_loads(persmem_host):
    host = persmem_host(PERSMEM_PLUGIN_MODULES="sample_wrapper,sample_echo")
    wrapper = next(p for p in host.plugins if p.name == "sample_wrapper")
    assert not wrapper.loaded and "hook wrappers are not supported" in wrapper.error and "register_tools" in wrapper.error
    assert "echo_say" in {spec.name for spec in host.collect_tools()}


def test_a_hookimpl_that_does_not_fit_another_plugins_hookspec_fails_its_own_plugin(persmem_host, monkeypatch):
    """register_panels is declared by the dashboard's hookspecs; a plugin answering it with a wrong signature is
    the one that fails, not the dashboard, and doctor says why."""
    bad = types.ModuleType("sample_bad_panels")

    @hookimpl
    def register_panels(register, host, colour):
        register("bad", title="Bad")

    bad.register_panels = register_panels
    monkeypatch.setitem(sys.modules, "sample_bad_panels", bad)
    host = persmem_host(PERSMEM_PLUGIN_MODULES="sample_bad_panels")
    plugins = {p.name: p for p in host.plugins}
    assert plugins["dashboard"].loaded and "dashboard" in host.sections
    assert host.pm.hook.register_panels.spec is not None  # the dashboard's hookspecs went in
    failed = plugins["sample_bad_panels"]
    assert not failed.loaded and not host.pm.has_plugin("sample_bad_panels")
    assert "register_panels" in failed.error and "colour" in failed.error and "dashboard" in failed.error
    answered = [plugin for plugin, _, _ in call_each(host.pm, "register_panels", register=lambda *a, **k: None,
                                                     host=host)]
    assert "dashboard" in answered and "sample_bad_panels" not in answered
    warned = [c for _, checks, _ in call_each(host.pm, "doctor", only={"core"}, host=host) for c in checks
              if "sample_bad_panels" in c.name]
    assert len(warned) == 1 and "register_panels" in warned[0].detail and "colour" in warned[0].detail


def test_cli_plugins_lists_versions_hooks_and_errors(run_cli, sample_env):
    result = run_cli("plugins", "--json", env=sample_env("sample_echo,sample_broken"))
    assert result.returncode == 0, result.stderr
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows["core"]["version"] == "0.1.0" and rows["core"]["status"] == "loaded"
    assert "register_tools" in rows["sample_echo"]["hooks"]
    assert rows["sample_broken"]["status"] == "error" and "ImportError" in rows["sample_broken"]["error"]
    text = run_cli("plugins", env=sample_env("sample_broken")).stdout
    assert "sample_broken" in text and "error:" in text


def test_help_works_with_a_broken_plugin_and_a_broken_config(run_cli, sample_env, tmp_path):
    env = sample_env("sample_broken")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "persmem.toml").write_text("this is [not toml")
    result = run_cli("--help", env=env)
    assert result.returncode == 0 and "serve" in result.stdout


def test_heavy_libraries_are_not_imported_by_the_cli():
    code = (
        "import sys; from persmem_core.host import Host; h = Host(); h.sections; "
        "import persmem_core.cli.main; "
        "heavy = [m for m in ('mcp', 'starlette', 'uvicorn', 'pydantic', 'litestar', 'onnxruntime', 'hnswlib') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_installed_plugin_is_discoverable():
    from importlib.metadata import entry_points

    names = {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert "core" in names
