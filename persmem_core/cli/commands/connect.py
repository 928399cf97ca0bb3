"""`persmem connect AGENT`: ready-to-paste client setup.

Every block it prints is meant to be pasted as is, so each is built by the library of its language rather
than by string formatting: shell lines with `shlex.join` (a URL or a home folder holding `$(...)`, backticks,
quotes or spaces stays one literal word), JSON with `json.dumps`, TOML strings with JSON's escaping (valid
TOML basic strings). Each block sits under a `## title (kind)` heading naming its language, which is what
tests/test_setup_text.py parses. Secrets are stored only as hashes: without `--rotate` the snippets hold a
placeholder, and a credential the agent does not have is replaced by the command that issues it.
"""

from __future__ import annotations

import json
import shlex
from urllib.parse import urlsplit

import click

from persmem_core.auth.agents import check_name
from persmem_core.invocation import persmem_argv, persmem_line
from persmem_core.errors import UserError

TOKEN_PLACEHOLDER = "<TOKEN>"
SECRET_PLACEHOLDER = "<SECRET-PATH>"
TOKEN_ENV = "PERSMEM_TOKEN"


def base_url(url: str | None, server) -> str:
    """The URL clients reach persmem at, without /mcp: `url`, else [server] public_url, else the bind address
    (a wildcard bind as loopback, IPv6 in brackets). A given URL must be http(s) with a host."""
    if url is None and not server.public_url:
        bind = server.host
        if bind in ("0.0.0.0", "::", ""):  # listening everywhere: this machine reaches it on loopback
            bind = "127.0.0.1"
        bind = f"[{bind}]" if ":" in bind else bind
        return f"http://{bind}:{server.port}"
    base = (url or server.public_url).rstrip("/")
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in base):
        raise UserError(
            f"{base!r} is not a URL clients can reach: give --url (or [server] public_url) as "
            "http(s)://HOST[:PORT][/prefix], for example https://mcp.example.com."
        )
    return base


def _toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # JSON string escapes are valid in TOML basic strings


@click.command()
@click.argument("agent_name")
@click.option("--url", help="Base URL clients reach (default: [server] public_url or http://127.0.0.1:PORT).")
@click.option("--rotate", is_flag=True, help="Issue fresh credentials now (the old ones stop working) and print "
              "them in the snippets.")
def connect(agent_name: str, url: str | None, rotate: bool) -> None:
    """Print setup for Claude Code, Codex CLI, Claude Desktop and a claude.ai connector URL."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    check_name(agent_name)
    base = base_url(url, host.config.server)
    mcp_url = f"{base}/mcp"
    token, secret, has_token, has_secret = _credentials(host, agent_name, rotate)
    home = str(host.home)
    out: list[str] = [f'# persmem setup for agent "{agent_name}"; MCP endpoint {mcp_url}']
    if rotate:
        out.append(f"# New credentials for {agent_name} (the old ones no longer work). Keep them private.")
    elif has_token or has_secret:
        out.append(f"# Only hashes of the secrets are stored: replace {TOKEN_PLACEHOLDER} / {SECRET_PLACEHOLDER} "
                   f"with what `persmem agent add` printed, or run `{persmem_line('connect', agent_name, '--rotate')}`"
                   " to issue new ones into these snippets.")

    def section(title: str, kind: str, *lines: str) -> None:
        out.extend(["", f"## {title} ({kind})", *lines])

    _http_sections(section, agent_name, mcp_url, token, has_token)
    _stdio_sections(section, agent_name, home)
    _connector_sections(section, host, agent_name, base, secret, has_secret)
    if "hooks" in click.get_current_context().find_root().command.commands:  # a plugin offers client hooks
        section("Ambient memory", "shell",
                "# hooks in Claude Code and Codex: every session captured, memories recalled at its start and on "
                "each prompt (for this home, whatever the shell's PERSMEM_HOME)",
                shlex.join(["env", f"PERSMEM_HOME={home}", *persmem_argv(), "hooks", "install", "--target", "all",
                            "--agent", agent_name]))
    click.echo("\n".join(out))


def _credentials(host, agent_name: str, rotate: bool) -> tuple[str | None, str | None, bool, bool]:
    """(token, secret path, whether the agent has a token, whether it has a secret path): with `rotate` both are
    issued now (and the agent made if new); else the agent must exist, and its secrets are known only as hashes."""
    if rotate:
        issued = host.agents.add(agent_name, token=True, secret_path=True, replace=True)
        return issued.token, issued.secret_path, True, True
    record = host.agents.agents().get(agent_name)
    if record is None or record.revoked is not None:
        raise UserError(
            f"no active agent named {agent_name!r}: `{persmem_line('agent', 'add', agent_name)}` creates it, "
            f"or `{persmem_line('connect', agent_name, '--rotate')}` creates it and prints its credentials "
            "into this setup."
        )
    return None, None, record.token_sha256 is not None, record.path_sha256 is not None


def _http_sections(section, agent_name: str, mcp_url: str, token: str | None, has_token: bool) -> None:
    """Claude Code and Codex CLI over HTTP with the agent's bearer token, or how to issue one."""
    if has_token:
        bearer = token or TOKEN_PLACEHOLDER
        section("Claude Code over HTTP", "shell", shlex.join(
            ["claude", "mcp", "add", "--transport", "http", "persmem", mcp_url,
             "--header", f"Authorization: Bearer {bearer}"]))
        section("Codex CLI over HTTP: the token in Codex's environment", "shell",
                shlex.join(["export", f"{TOKEN_ENV}={bearer}"]))
        section("Codex CLI over HTTP: add to ~/.codex/config.toml", "TOML",
                "[mcp_servers.persmem]", f"url = {_toml_string(mcp_url)}",
                f"bearer_token_env_var = {_toml_string(TOKEN_ENV)}")
    else:
        renew_token = persmem_line("agent", "token", agent_name)
        section("Claude Code and Codex CLI over HTTP", "note",
                f"# {agent_name} has no bearer token: `{renew_token}` issues one (its secret path keeps working).")


def _stdio_sections(section, agent_name: str, home: str) -> None:
    """Claude Code and Claude Desktop starting `persmem serve --transport stdio` on this machine."""
    stdio_argv = [*persmem_argv(absolute=True), "serve", "--transport", "stdio", "--agent", agent_name]
    section("Claude Code over stdio, on this machine", "shell", shlex.join(
        ["claude", "mcp", "add", "persmem", "--env", f"PERSMEM_HOME={home}", "--", *stdio_argv]))
    desktop = {"mcpServers": {"persmem": {"command": stdio_argv[0], "args": stdio_argv[1:],
                                          "env": {"PERSMEM_HOME": home}}}}
    section("Claude Desktop over stdio: merge into claude_desktop_config.json", "JSON",
            json.dumps(desktop, indent=2, ensure_ascii=False))


def _connector_sections(section, host, agent_name: str, base: str, secret: str | None, has_secret: bool) -> None:
    """A claude.ai custom connector: with OAuth (when on), and with the agent's secret path (or how to issue one)."""
    mcp_url = f"{base}/mcp"
    public_note = ("# claude.ai connects from Anthropic's servers: serve persmem over public HTTPS and give "
                   "that URL as --url or [server] public_url.")
    if host.section("oauth").enabled:
        lines = [mcp_url,
                 "# In claude.ai: Settings > Connectors > Add custom connector, paste this URL, Connect. persmem's "
                 f"consent page opens: type the agent name {agent_name!r} and the operator passphrase "
                 f"(`{persmem_line('oauth', 'password')}` sets it) or a one-time code from "
                 f"`{persmem_line('oauth', 'approve-code')}`. `{persmem_line('oauth', 'clients')}` lists "
                 f"connectors; `{persmem_line('oauth', 'revoke', 'ID')}` ends one."]
        if urlsplit(base).scheme != "https":
            lines.append(public_note)
        section("claude.ai custom connector with OAuth, recommended: no secret in the URL", "URL", *lines)
    if has_secret:
        lines = [f"{base}/{secret or SECRET_PLACEHOLDER}/mcp"]
        if urlsplit(base).scheme != "https":
            lines.append(public_note)
        section("claude.ai custom connector with a secret path instead: the secret path in the URL is the "
                "credential", "URL", *lines)
    else:
        renew_secret = persmem_line("agent", "secret-path", agent_name)
        section("claude.ai custom connector with a secret path instead: it needs one", "note",
                f"# {agent_name} has no secret path yet: `{renew_secret}` issues one (its token keeps working); "
                f"then run `{persmem_line('connect', agent_name)}` again, or put the printed path into "
                f"{base}/SECRET-PATH/mcp.")
