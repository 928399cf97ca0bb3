"""Registering panels follows the core's rule for every registration kind, through a real `persmem serve` (and
`persmem dashboard`): two plugins claiming one panel id stop the server naming both and how to disable one; an
invalid panel id, or a register_panels hook that raises, disables that plugin's panels and is shown as a problem
while the server runs."""

import os
import subprocess
from pathlib import Path

import httpx2

from dashfixtures import http_login
from persmem_core.sdk.testing import clean_env, free_port, persmem_command, start_server

HERE = Path(__file__).parent
FAST = "memory_hnsw,amq_maildir,shell,git,searxng"  # panels are all these tests need


def env_with(home: Path, modules: str) -> dict[str, str]:
    return clean_env(home, PERSMEM_DISABLE_PLUGINS=FAST, PERSMEM_PLUGIN_MODULES=modules,
                     PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))


# -- two plugins claim one panel id -------------------------------------------------------------------------------


def test_two_plugins_registering_one_panel_id_stop_the_server_naming_both(tmp_path):
    env = env_with(tmp_path / "home", "panel_plugin_for_tests,panel_conflict_for_tests")
    for command in (("serve", "--port", str(free_port())), ("dashboard", "--port", str(free_port()))):
        refused = subprocess.run(persmem_command(*command), env=env, capture_output=True, text=True, timeout=60)
        assert refused.returncode == 1, (command, refused.stderr)
        last = refused.stderr.strip().splitlines()[-1]
        assert "dashboard panel 'weather' is registered by both plugin" in last, command
        assert "'panel_plugin_for_tests'" in last and "'panel_conflict_for_tests'" in last, command
        assert "Disable one of them" in last and "PERSMEM_DISABLE_PLUGINS=panel_" in last, command
        assert "Traceback" not in refused.stderr, command


# -- a plugin's panels gone wrong ---------------------------------------------------------------------------------


def test_an_invalid_panel_id_or_a_crashing_hook_disables_only_that_plugins_panels(tmp_path):
    home = tmp_path / "home"
    server = start_server(home, ("kite",), env_with(
        home, "panel_plugin_for_tests,panel_bad_id_for_tests,panel_crash_for_tests"))
    base = server.base_url + "/dashboard"
    try:
        with httpx2.Client(timeout=10, follow_redirects=False) as browser:
            assert http_login(browser, server, "kite").status_code in (302, 303)
            system = browser.get(base + "/system").text
            assert "panel_bad_id_for_tests: register_panels failed, its panels are disabled" in system
            assert "panel id &#39;Bad Id!&#39; is not allowed" in system
            assert "panel_crash_for_tests: register_panels failed, its panels are disabled" in system
            assert "the tide tables are missing" in system
            assert browser.get(base + "/almanac").status_code == 404  # registered before the bad id: disabled too
            assert browser.get(base + "/tides").status_code == 404  # registered before the crash: disabled too
            assert 'id="weather"' in browser.get(base + "/weather").text  # the other plugins' panels are served
        assert "register_panels failed" in server.log()
    finally:
        server.stop()
