"""`persmem connect AGENT`: ready-to-paste client setup."""

from __future__ import annotations

import json
import shutil
import sys

import click

from persmem_core.agents import check_name


@click.command()
@click.argument("agent_name")
@click.option("--url", help="Base URL clients reach (default: [server] public_url or http://127.0.0.1:PORT).")
@click.option("--rotate", is_flag=True, help="Issue fresh credentials now and print them in the snippets.")
def connect(agent_name: str, url: str | None, rotate: bool) -> None:
    """Print setup for Claude Code, Codex CLI, Claude Desktop and a claude.ai connector URL."""
    from persmem_core.commands import get_host

    host = get_host()
    check_name(agent_name)
    server = host.config.server
    base = (url or server.public_url or f"http://{server.host}:{server.port}").rstrip("/")
    token, secret = "<TOKEN from `persmem agent add`>", "<SECRET-PATH>"
    if rotate:
        issued = host.agents.add(agent_name, token=True, secret_path=True, replace=True)
        token, secret = issued.token, issued.secret_path
        click.echo(f"# New credentials for {agent_name} (the old ones no longer work). Keep them private.")
    exe = shutil.which("persmem") or f"{sys.executable} -m persmem_core"
    home = str(host.home)
    stdio_args = ["serve", "--transport", "stdio", "--agent", agent_name]
    click.echo(f"""# persmem setup for agent "{agent_name}"; MCP endpoint {base}/mcp

## Claude Code (HTTP)
claude mcp add --transport http persmem {base}/mcp --header "Authorization: Bearer {token}"
## Claude Code (stdio, same machine, one client at a time)
claude mcp add persmem --env PERSMEM_HOME={home} -- {exe} {' '.join(stdio_args)}

## Codex CLI (~/.codex/config.toml), HTTP; export PERSMEM_TOKEN={token}
[mcp_servers.persmem]
url = "{base}/mcp"
bearer_token_env_var = "PERSMEM_TOKEN"

## Claude Desktop (claude_desktop_config.json), stdio
{json.dumps({"mcpServers": {"persmem": {"command": exe.split()[0], "args": exe.split()[1:] + stdio_args,
                                        "env": {"PERSMEM_HOME": home}}}}, indent=2)}

## claude.ai custom connector (cannot send headers: uses the agent's secret path; serve it over HTTPS)
{base}/{secret}/mcp""")
    if not rotate:
        click.echo("\n# Tokens and secret paths are stored only as hashes. Use the ones `persmem agent add` printed,\n"
                   f"# or `persmem connect {agent_name} --rotate` to issue new ones into these snippets.")
