"""`persmem connect AGENT`: ready-to-paste client setup.

Every block it prints is meant to be pasted as is, so each is built by the library of its language rather
than by string formatting: shell lines with `shlex.join` (a URL or a home folder holding `$(...)`, backticks,
quotes or spaces stays one literal word), JSON with `json.dumps`, TOML strings with JSON's escaping (valid
TOML basic strings). Each block sits under a `## title (kind)` heading naming its language, which is what
tests/test_setup_text.py parses. Secrets are stored only as hashes: without `--rotate` the snippets hold a
tests/test_setup_text.py parses. The registry keeps only hashes of the secrets; a token issued on this machine is
also kept in a file only the user can read (auth/token_files.py), so the shell lines read it there
(`Bearer $(cat -- FILE)`) and work as pasted; `--show-token` (or `--rotate`) prints the token itself, for
config files a shell does not expand. A credential the agent does not have, or whose file is missing, is replaced
by the command that issues it. `--tools` chooses the tool sets the agent's connections list (tool_sets.py), and
the output says what they cost in tokens per session.
"""

from __future__ import annotations

import json
import shlex
from urllib.parse import urlsplit

import click

from persmem_core.auth.agents import check_name
from persmem_core.invocation import persmem_argv, persmem_line
from persmem_core.errors import UserError

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
@click.option("--show-token", is_flag=True, help="Print the agent's token itself in the snippets (from its token "
              "file) instead of lines that read the file: for config files a shell does not expand.")
@click.option("--tools", "tool_sets", metavar="SETS", help="Tool sets this agent's connections list, e.g. "
              "memory,mail,workspace (saved for the agent; `persmem agent tools` changes them later).")
def connect(agent_name: str, url: str | None, rotate: bool, show_token: bool, tool_sets: str | None) -> None:
    """Print setup for Claude Code, Codex CLI, Claude Desktop and a claude.ai connector URL."""
    from persmem_core.auth.token_files import read_token, token_file
    from persmem_core.cli.commands import get_host
    from persmem_core.tool_costs import tool_sets_text
    from persmem_core.tool_sets import parse_sets

    host = get_host()
    check_name(agent_name)
    sets = parse_sets(host, tool_sets) if tool_sets is not None else None
    base = base_url(url, host.config.server)
    mcp_url = f"{base}/mcp"
    token, secret, has_token, has_secret = _credentials(host, agent_name, rotate)
    if sets is not None:
        host.agents.set_tool_sets(agent_name, sets)
    kept = read_token(host.home, agent_name) if has_token and token is None else None
    if show_token and kept:
        token = kept
    home = str(host.home)
    out: list[str] = [f'# persmem setup for agent "{agent_name}"; MCP endpoint {mcp_url}']
    if rotate:
        out.append(f"# New credentials for {agent_name} (the old ones no longer work). Keep them private.")
    elif has_secret:
        out.append(f"# Only a hash of the secret path is stored: replace {SECRET_PLACEHOLDER} with what `persmem "
                   f"agent add` printed, or run `{persmem_line('connect', agent_name, '--rotate')}` to issue new "
                   "credentials into these snippets.")
    out.extend("# " + line for line in tool_sets_text(host, agent_name).splitlines())

    def section(title: str, kind: str, *lines: str) -> None:
        out.extend(["", f"## {title} ({kind})", *lines])

    bearer = Bearer(token, token_file(host.home, agent_name) if kept else None)
    _http_sections(section, agent_name, mcp_url, bearer, has_token)
    _stdio_sections(section, agent_name, home)
    _connector_sections(section, host, agent_name, base, secret, has_secret)
    if "hooks" in click.get_current_context().find_root().command.commands:  # a plugin offers client hooks
        section("Ambient memory", "shell",
                "# hooks in Claude Code and Codex: every session captured, memories recalled at its start and on "
                "each prompt (for this home, whatever the shell's PERSMEM_HOME)",
                shlex.join(["env", f"PERSMEM_HOME={home}", *persmem_argv(), "hooks", "install", "--target", "all",
                            "--agent", agent_name]))
        section("Hooks on another machine (a laptop reaching this server)", "shell",
                "# with persmem installed there: the token is asked for (or --token-file, or $PERSMEM_TOKEN) and "
                "kept in a 0600 file, never in the clients' settings",
                shlex.join(["persmem", "hooks", "install", "--url", base, "--agent", agent_name]),
                "# without persmem: the server hands out the hook, one stdlib-only file that installs itself "
                "(the token on stdin)",
                f"curl -fsS {shlex.quote(base + '/hooks/client.py')} -o ~/.persmem-hook.py && python3 "
                f"~/.persmem-hook.py install --url {shlex.quote(base)} --agent {shlex.quote(agent_name)}")
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


class Bearer:
    """The agent's token as the shell lines give it: the token itself, or `$(cat -- FILE)` reading its token
    file (a substitution written for bash; the file's path quoted inside it, so a hostile path stays one word)."""

    def __init__(self, token: str | None, file=None):
        self.token, self.file = token, file

    def known(self) -> bool:
        return bool(self.token or self.file)

    def shell_words(self, *words: str, prefix: str) -> str:
        """`words` joined for the shell, then one more word: `prefix` followed by the token."""
        if self.token:
            return shlex.join([*words, prefix + self.token])
        return shlex.join(words) + f' "{prefix}$(cat -- {shlex.quote(str(self.file))})"'


def _http_sections(section, agent_name: str, mcp_url: str, bearer: Bearer, has_token: bool) -> None:
    """Claude Code and Codex CLI over HTTP with the agent's bearer token, or how to issue one."""
    if has_token and not bearer.known():
        renew_token = persmem_line("agent", "token", agent_name)
        section("Claude Code and Codex CLI over HTTP", "note",
                f"# {agent_name}'s token was issued before persmem kept tokens in a file, and only its hash is "
                f"stored: `{renew_token}` issues a new one (the old one stops working), then run "
                f"`{persmem_line('connect', agent_name)}` again.")
    elif has_token:
        section("Claude Code over HTTP", "shell", bearer.shell_words(
            "claude", "mcp", "add", "--transport", "http", "persmem", mcp_url, "--header",
            prefix="Authorization: Bearer "))
        section("Codex CLI over HTTP: the token in Codex's environment", "shell",
                bearer.shell_words("export", prefix=f"{TOKEN_ENV}="))
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
