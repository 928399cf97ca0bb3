#!/usr/bin/env bash
# Install everything persmem needs and run the whole test suite.
# Usage: bash tests/run.sh [pytest args]   (the README's test command; .ci/run calls it)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${PERSMEM_TEST_VENV:-.venv}"

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel
# The model-export test needs optimum, which needs torch: the CPU build first, or pip picks a CUDA one (GBs).
"$VENV/bin/python" -m pip install --quiet torch==2.13.0
plugin_dirs=()
for dir in plugins/*/; do
    [ -f "$dir/pyproject.toml" ] && plugin_dirs+=("-e" "${dir}[test]")
done
"$VENV/bin/python" -m pip install --quiet -e '.[test]' "${plugin_dirs[@]}"

# The dashboard and extension tests drive a real Chromium (Debian's; Playwright's download does not work
# here), the extension's unit tests run on node, and shell_exec/git_op run their commands in bubblewrap.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v git >/dev/null 2>&1 || missing+=(git)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
    else
        echo "The browser and extension tests need: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi

mkdir -p test-artifacts
exec "$VENV/bin/python" -m pytest -q -ra "$@"
