"""The `persmem` command: the root group, plus plugins' own subcommands.

Each built-in subcommand lives in `persmem_core/cli/commands/<name>.py`.
Plugins add theirs through the `register_commands(cli)` hook. Errors a
user can fix print as one line and exit 1, never as a traceback.
"""

from __future__ import annotations

import sys

import click

from persmem_core import __version__
from persmem_core.errors import UserError
from persmem_core.cli.commands import get_host  # noqa: F401 - the name plugin commands import
from persmem_core.host import Host


class PersmemGroup(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            raise click.ClickException(str(exc)) from None


@click.group(cls=PersmemGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="persmem")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """persmem: memory, messaging and workspace tools for AI assistants, served over MCP.

    Config: $PERSMEM_CONFIG or $PERSMEM_HOME/persmem.toml (optional: embedded
    defaults apply). Data: $PERSMEM_HOME (default ~/.local/share/persmem).
    """
    ctx.ensure_object(dict)


def _add_builtin_commands() -> None:
    from persmem_core.cli.commands import (
        agent, backup, cluster, config, connect, doctor, key, oauth, plugin_new, plugins, restore, serve,
    )

    for command in (
        serve.serve,
        plugins.plugins,
        doctor.doctor,
        config.config,
        agent.agent,
        oauth.oauth,
        key.key,
        connect.connect,
        backup.backup,
        restore.restore,
        plugin_new.plugin,
        cluster.cluster,
    ):
        cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    try:
        host = Host()
    except UserError as exc:  # e.g. two plugins claim one config section
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    _add_builtin_commands()
    from persmem_core.plugins import call_each

    for plugin, _, exc in call_each(host.pm, "register_commands", cli=cli):
        if exc is not None:
            host._plugin_failed(plugin, "register_commands failed", exc)
    cli.main(args=argv, prog_name="persmem", obj={"host": host})
