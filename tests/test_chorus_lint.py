"""The Firefox build of Chorus passes Mozilla's add-on linter (web-ext lint, the add-on store's rules) with no
errors; the Chromium build has the Chromium-only keys and no Firefox ones. Warnings are printed, not failed on:
the ones expected are explained in extension/README.md (Lint)."""

import json
import subprocess

import pytest

from chorus_build import EXTENSION, built_extension  # tests/ is on sys.path under pytest's default import mode

WEB_EXT = EXTENSION / "node_modules" / ".bin" / "web-ext"


def test_firefox_build_passes_web_ext_lint():
    if not WEB_EXT.exists():
        pytest.fail(f"{WEB_EXT} is missing: run `npm ci --prefix extension` (tests/run.sh does)")
    source = built_extension("firefox")
    result = subprocess.run([str(WEB_EXT), "lint", "--source-dir", str(source), "--output", "json", "--no-config-discovery"],
                            capture_output=True, text=True, timeout=120, cwd=EXTENSION)
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"web-ext lint printed no JSON report (exit {result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    for warning in report["warnings"]:
        print(f"web-ext lint warning {warning['code']} in {warning.get('file')}: {warning['message']}")
    errors = [f"{e['code']} in {e.get('file')}: {e['message']} — {e.get('description', '')}" for e in report["errors"]]
    assert errors == [], "web-ext lint found errors in the Firefox build:\n" + "\n".join(errors)
    assert result.returncode == 0, result.stderr[-2000:]


def test_each_build_declares_only_its_browsers_panel_and_background():
    chromium = json.loads((built_extension("chromium") / "manifest.json").read_text())
    firefox = json.loads((built_extension("firefox") / "manifest.json").read_text())

    assert chromium["background"] == {"service_worker": "background.js"}
    assert chromium["side_panel"] == {"default_path": "sidepanel.html"}
    assert "sidePanel" in chromium["permissions"]
    assert not {"sidebar_action", "browser_specific_settings"} & chromium.keys()

    assert firefox["background"] == {"scripts": ["background.js"]}
    assert firefox["sidebar_action"]["default_panel"] == "sidepanel.html"
    assert firefox["browser_specific_settings"]["gecko"]["id"] == "chorus@persmem"
    assert "sidePanel" not in firefox["permissions"] and "side_panel" not in firefox

    for browser in ("chromium", "firefox"):
        shipped = {p.name for p in built_extension(browser).iterdir()}
        assert {"sidepanel.html", "sidepanel.js", "content.js", "selectors.js", "background.js", "lib"} <= shipped
        assert not {"node_modules", "tests", "build.mjs", "package.json", "dist"} & shipped, (browser, shipped)
