"""`persmem doctor`: one line per check, PASS/WARN/FAIL; exit 1 on any FAIL."""

from __future__ import annotations

import sys

import click


@click.command()
def doctor() -> None:
    """Check config, data folder, port, agents and every plugin's own health."""
    from persmem_core.cli.commands import get_host
    from persmem_core.doctor import run_doctor

    checks = run_doctor(get_host())
    for check in checks:
        click.echo(check.line())
    failed = sum(c.status == "FAIL" for c in checks)
    warned = sum(c.status == "WARN" for c in checks)
    click.echo(f"{len(checks)} checks: {failed} failed, {warned} warnings")
    sys.exit(1 if failed else 0)
