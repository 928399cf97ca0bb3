"""The default model is prepared once per installed model file, in the user's cache (XDG_CACHE_HOME), shared by
every home; a server stopped (Ctrl-C) during the preparation exits at once, leaving no partial file and no child
behind, and the next start prepares it, the one after uses it as it is."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from persmem_core.sdk.testing import clean_env, persmem_command, start_server


def env_for(home: Path, xdg: Path) -> dict[str, str]:
    env = clean_env(home, XDG_CACHE_HOME=str(xdg), PERSMEM_DISABLE_PLUGINS="shell,git,searxng")
    env.pop("PERSMEM_CACHE_DIR", None)  # the test run's shared cache: this test is about the default one
    return env


def children_preparing_in(folder: Path) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(folder) in text and "quantize_dynamic" in text:
            found.append(text)
    return found


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_ctrl_c_during_preparation_exits_at_once_and_the_model_is_prepared_once(tmp_path):
    xdg = tmp_path / "xdg"
    models = xdg / "persmem" / "models"
    server = start_server(tmp_path / "one", agents=("kite",), env=env_for(tmp_path / "one", xdg))
    try:
        assert wait_for(lambda: children_preparing_in(models), 30), f"no preparation started:\n{server.log()}"
        started = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        server.process.wait(timeout=5)
        took = time.monotonic() - started
    finally:
        server.stop()
    print(f"SIGINT during the preparation: exited in {took:.2f} s")
    assert server.process.returncode == 0, server.log()
    assert "Traceback" not in server.log(), server.log()
    assert wait_for(lambda: not children_preparing_in(models), 2), "the preparing child outlived the server"
    assert not list(models.rglob("*.onnx")), "a partial model was left in the cache"
    assert models.stat().st_mode & 0o777 == 0o700 and models.parent.stat().st_mode & 0o777 == 0o700

    second = start_server(tmp_path / "two", agents=("kite",), env=env_for(tmp_path / "two", xdg))
    try:
        second.call_tool("memory_store", {"content": "The staging database moved to port 6432."}, agent="kite")
        found = second.call_tool("memory_search", {"query": "which port does staging use"}, agent="kite")
        assert "6432" in found["results"][0]["content"]
        assert "(dynamic int8)" in second.log(), second.log()
    finally:
        second.stop()
    [model] = models.glob("*/model.onnx")
    stamp = model.stat().st_mtime_ns
    assert not (tmp_path / "two" / "memory" / ".models").exists(), "the model was prepared into the home"

    third = start_server(tmp_path / "three", agents=("kite",), env=env_for(tmp_path / "three", xdg))
    try:
        found = third.call_tool("memory_search", {"query": "anything stored?"}, agent="kite")
        assert "results" in found
        assert f"using the prepared model {model}" in third.log() and "(dynamic int8)" not in third.log()
    finally:
        third.stop()
    assert model.stat().st_mtime_ns == stamp, "a prepared model was made again"

    prepare = subprocess.run(persmem_command("model", "prepare"), env=env_for(tmp_path / "four", xdg),
                             capture_output=True, text=True, timeout=120)
    assert prepare.returncode == 0 and f"prepared models in {models}" in prepare.stdout, prepare.stderr
    assert model.stat().st_mtime_ns == stamp, "`persmem model prepare` made a prepared model again"
