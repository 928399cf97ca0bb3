"""The plugin author's path: scaffold, pip install, call the tool on a real server, run its own tests."""

import os
import subprocess
import sys

from persmem_core.transport.tool_answers import ToolCallError


def test_scaffolded_plugin_installs_and_serves_its_tool(tmp_path, run_cli, persmem_env, persmem_server):
    created = run_cli("plugin", "new", "demo_notes", "--dir", str(tmp_path), env=persmem_env())
    assert created.returncode == 0, created.stderr
    root = tmp_path / "persmem-plugin-demo-notes"
    assert (root / "pyproject.toml").exists() and (root / "tests" / "test_demo_notes.py").exists()

    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(target), str(root)],
        capture_output=True, text=True, timeout=300,
    )
    assert install.returncode == 0, install.stderr
    env = {"PYTHONPATH": os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")])}

    listed = run_cli("plugins", env=persmem_env(**env)).stdout
    assert "demo_notes 0.1.0 [loaded] persmem-plugin-demo-notes" in listed

    server = persmem_server(agents=["kite"], env=env, config={"demo_notes": {"greeting": "ahoy"}})
    assert server.call_tool("demo_notes_greet", {"text": "it works"}, agent="kite") == {
        "message": "ahoy, kite: it works"
    }
    try:
        server.call_tool("demo_notes_greet", {"text": ""}, agent="kite")
        raise AssertionError("expected a ToolCallError")
    except ToolCallError as exc:
        assert "text is empty" in str(exc)

    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**os.environ, **env},
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout


def test_plugin_new_refuses_bad_names_and_existing_folders(tmp_path, run_cli, persmem_env):
    bad = run_cli("plugin", "new", "Bad-Name", "--dir", str(tmp_path), env=persmem_env())
    assert bad.returncode == 1 and "invalid plugin name" in bad.stderr
    assert run_cli("plugin", "new", "twice", "--dir", str(tmp_path), env=persmem_env()).returncode == 0
    again = run_cli("plugin", "new", "twice", "--dir", str(tmp_path), env=persmem_env())
    assert again.returncode == 1 and "already exists" in again.stderr
