"""`persmem config show|check|schema|path`."""

from __future__ import annotations

import json

import click


@click.group()
def config() -> None:
    """Inspect and validate the configuration."""


@config.command()
def path() -> None:
    """Print the config file path (it need not exist)."""
    from persmem_core.commands import get_host

    click.echo(get_host().config_path)


@config.command()
def check() -> None:
    """Validate the config file and environment overrides; exit 1 naming the bad path."""
    from persmem_core.commands import get_host

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

    from persmem_core.commands import get_host
    from persmem_core.config import to_builtins

    data = to_builtins(get_host().config)
    click.echo(json.dumps(data, indent=2) if fmt == "json" else tomli_w.dumps(data).rstrip())


@config.command()
def schema() -> None:
    """Print the JSON Schema of persmem.toml, generated from every loaded plugin's section."""
    from persmem_core.commands import get_host

    click.echo(json.dumps(get_host().config_schema(), indent=2))
