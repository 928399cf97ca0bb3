"""`persmem plugin new NAME`: scaffold a working plugin distribution."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from string import Template

import click

from persmem_core.invocation import persmem_line, python_line
from persmem_core.errors import UserError

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{1,30}$")

# template file -> path in the new plugin (formatted with the names)
LAYOUT = {
    "pyproject.toml.tmpl": "pyproject.toml",
    "README.md.tmpl": "README.md",
    "package__init__.py.tmpl": "{package}/__init__.py",
    "config.py.tmpl": "{package}/config.py",
    "tools.py.tmpl": "{package}/tools.py",
    "plugin.py.tmpl": "{package}/plugin.py",
    "test_plugin.py.tmpl": "tests/test_{name}.py",
}


def scaffold(name: str, parent: Path) -> Path:
    if not NAME_RE.match(name):
        raise UserError(f"invalid plugin name {name!r}: use 2-31 lowercase letters, digits and _, starting with a letter.")
    names = {
        "name": name,
        "dist_name": name.replace("_", "-"),
        "package": f"persmem_plugin_{name}",
        "class_name": "".join(part.capitalize() for part in name.split("_")),
    }
    root = parent / f"persmem-plugin-{names['dist_name']}"
    if root.exists():
        raise UserError(f"{root} already exists; pick another name or folder.")
    templates = files("persmem_core") / "plugin_template"
    for template_name, target in LAYOUT.items():
        path = root / target.format(**names)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(Template((templates / template_name).read_text()).substitute(names))
    return root


@click.group()
def plugin() -> None:
    """Plugin author tools."""


@plugin.command()
@click.argument("name")
@click.option("--dir", "parent", type=click.Path(path_type=Path, file_okay=False), default=".", show_default=True)
def new(name: str, parent: Path) -> None:
    """Create persmem-plugin-NAME/: pyproject with entry point, a tool, a config section and a passing test."""
    root = scaffold(name, parent).resolve()
    # pip and pytest of the Python that runs persmem: bare `pip` outside the venv installs elsewhere or is
    # not found, and the plugin must land where this persmem looks for plugins
    click.echo(f"created {root}\nnext steps (each line can be pasted into a shell as is):\n"
               f"  {python_line('-m', 'pip', 'install', '-e', f'{root}[test]')}\n"
               f"  {python_line('-m', 'pytest', str(root))}\n"
               f"  {persmem_line('plugins')}   # lists {name!r} as loaded")
