"""Every `from persmem... import name` in the repository resolves, those inside functions too: a module moved to
another room without its importers following fails here, not when a panel or a command first runs the import."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

ROOT = Path(__file__).parent.parent
# a benchmark may also import where an earlier commit kept a module (it runs against such commits)
EARLIER_PATHS = {"persmem_memory_hnsw.query"}


def package_of(file: Path) -> list[str]:
    parts, folder = [], file.parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    return parts


def imports(file: Path):
    for node in ast.walk(ast.parse(file.read_text())):
        if isinstance(node, ast.ImportFrom):
            package = package_of(file)
            module = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]).strip(".") \
                if node.level else node.module
            if module and module.startswith("persmem"):
                yield node.lineno, module, [alias.name for alias in node.names]


def test_every_import_of_persmem_code_resolves():
    files = [f for top in ("persmem_core", "plugins", "tests", "benchmarks") for f in (ROOT / top).rglob("*.py")
             if ".egg-info" not in str(f) and "node_modules" not in str(f)]
    unresolved = []
    for file in files:
        for line, module, names in imports(file):
            if module in EARLIER_PATHS:
                continue
            try:
                loaded = importlib.import_module(module)
            except ImportError as exc:
                unresolved.append(f"{file.relative_to(ROOT)}:{line}: {module} ({exc})")
                continue
            for name in names:
                if name != "*" and not hasattr(loaded, name):
                    try:
                        importlib.import_module(f"{module}.{name}")
                    except ImportError:
                        unresolved.append(f"{file.relative_to(ROOT)}:{line}: {name} from {module}")
    assert not unresolved, "\n".join(unresolved)
