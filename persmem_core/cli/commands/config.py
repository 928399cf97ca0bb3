"""`persmem config show|check|schema|reference|path`."""

from __future__ import annotations

import json

import click


@click.group()
def config() -> None:
    """Inspect and validate the configuration."""


@config.command()
def path() -> None:
    """Print the config file path (it need not exist)."""
    from persmem_core.cli.commands import get_host

    click.echo(get_host().config_path)


@config.command()
def check() -> None:
    """Validate the config file and environment overrides; exit 1 naming the bad path."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    host.config  # raises ConfigError with the file and the path
    for warning in host.warnings:
        click.echo(f"warning: {warning}", err=True)
    where = host.config_path if host.config_path.exists() else "no config file (embedded defaults)"
    click.echo(f"config OK: {where}")


@config.command()
@click.option("--format", "fmt", type=click.Choice(["toml", "json"]), default="toml")
def show(fmt: str) -> None:
    """Print the effective config: defaults, file and environment overrides merged."""
    import tomli_w

    from persmem_core.cli.commands import get_host
    from persmem_core.config import to_builtins

    data = to_builtins(get_host().config)
    click.echo(json.dumps(data, indent=2) if fmt == "json" else tomli_w.dumps(data).rstrip())


@config.command()
def schema() -> None:
    """Print the JSON Schema of persmem.toml, generated from every loaded plugin's section."""
    from persmem_core.cli.commands import get_host

    click.echo(json.dumps(get_host().config_schema(), indent=2))


@config.command()
@click.option("--write", "page", type=click.Path(dir_okay=False, exists=True),
              help="Put each table between its markers in this Markdown file (docs/configuration.md).")
def reference(page: str | None) -> None:
    """Print every loaded plugin's config section as a Markdown table (field, default, meaning), or with --write
    update the marked tables of a page."""
    from pathlib import Path

    from persmem_core.cli.commands import get_host
    from persmem_core.config_reference import rewrite, tables

    sections = {name: typ for name, (typ, _) in get_host().sections.items()}
    if page is None:
        click.echo("\n".join(f"## [{name}]\n\n{table}" for name, table in tables(sections).items()).rstrip())
        return
    try:
        text, unmarked = rewrite(Path(page).read_text(), sections)
    except ValueError as exc:
        raise click.ClickException(f"{page}: {exc}") from None
    Path(page).write_text(text)
    click.echo(f"{page}: tables of {len(sections) - len(unmarked)} sections written"
               + (f"; no marked table for: {', '.join(unmarked)}" if unmarked else ""))
