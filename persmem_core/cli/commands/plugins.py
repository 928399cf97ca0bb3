"""`persmem plugins`: what is installed, what loaded, and why not."""

from __future__ import annotations

import json

import click


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def plugins(as_json: bool) -> None:
    """List plugins: name, version, hooks, and load errors."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    rows = [
        {
            "name": p.name,
            "version": p.version,
            "status": "disabled" if p.disabled else ("error" if p.error else "loaded"),
            "hooks": p.hooks,
            "source": p.source,
            "error": p.error,
        }
        for p in host.plugins
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        click.echo(f"{row['name']} {row['version'] or '-'} [{row['status']}] {row['source']}")
        if row["hooks"]:
            click.echo(f"    hooks: {', '.join(row['hooks'])}")
        if row["error"]:
            click.echo(f"    error: {row['error']}")
