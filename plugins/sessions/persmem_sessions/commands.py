"""`persmem hooks ...` (install, status, uninstall the client hooks) and `persmem sessions ...` (the archives)."""

from __future__ import annotations

import os
from pathlib import Path

import click

TARGET_CHOICE = click.Choice(["claude", "codex", "all"])


def _chosen(target: str, install: bool = False):
    """The targets `--target` names. For an install, `all` takes the clients whose config folder exists here and
    refuses when neither does (hook.chosen_targets); otherwise (status, uninstall) both."""
    from .installer import chosen_targets, targets

    if install:
        return chosen_targets(target, os.environ)
    found = targets(os.environ)
    return list(found.values()) if target == "all" else [found[target]]


def _after_codex_install(target, trust: bool) -> None:
    """After Codex's hooks.json is written: Codex runs a new or changed hook only once the user trusts it (its /hooks
    screen, keyed by the hook's hash), and skips it silently until then. Say so, then (unless --no-codex-trust)
    trust persmem's own hooks through Codex's app-server (codex_trust.py: Codex computes the hashes) and check."""
    click.echo("  Codex runs a new or changed hook only after it is trusted (its /hooks screen); until then it skips "
               "it without a word.")
    if not trust:
        click.echo("  --no-codex-trust: open /hooks in Codex and trust persmem's hooks there.")
        return
    from .codex_trust import after_install

    click.echo("  Trusting persmem's own hooks through Codex's app-server (the hashes Codex computes, written where "
               "its /hooks screen writes them; no other hook is touched):")
    for line in after_install(target.folder, os.environ):
        click.echo(f"  {line}")


def _read_token(token_file: str | None) -> str:
    """The agent's token for `--url`: --token-file, else $PERSMEM_TOKEN, else stdin (typed hidden, or piped)."""
    import sys

    from .hook import SettingsError, ask_token

    try:
        return ask_token({"token_file": token_file}, os.environ, sys.stdin)
    except (SettingsError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


@click.group()
def hooks() -> None:
    """Claude Code and Codex hooks: every session captured, memories recalled at its start and on each prompt.

    The hooks are small clients of the running persmem server (its local socket): without a server they do
    nothing and never slow the client down.
    """


@hooks.command()
@click.option("--target", type=TARGET_CHOICE, default="all", show_default=True,
              help="Which client's settings to edit (all: the clients that have a config folder here).")
@click.option("--agent", envvar="PERSMEM_AGENT",
              help="The agent the hooks speak for (default: [server] default_agent). Env PERSMEM_AGENT.")
@click.option("--url", help="A persmem server on another machine (https://box/): the hooks talk HTTP(S) to it "
                            "with the agent's token (--agent is then required).")
@click.option("--token-file", type=click.Path(dir_okay=False),
              help="With --url: read the agent's token from this file (else $PERSMEM_TOKEN, else stdin). It is "
                   "copied to ~/.config/persmem/hook-token-AGENT (mode 600), never into the settings.")
@click.option("--no-codex-trust", is_flag=True,
              help="Leave trusting the hooks to you in Codex's /hooks screen (by default they are trusted through "
                   "Codex's app-server, which computes their hashes).")
def install(target: str, agent: str | None, url: str | None, token_file: str | None, no_codex_trust: bool) -> None:
    """Add the hooks to ~/.claude/settings.json and/or ~/.codex/hooks.json (idempotent; backs up each file)."""
    from .installer import hook_command, install as install_target, install_remote

    if url:
        if not agent:
            raise click.ClickException("--url needs --agent NAME: the agent whose token the hooks use")
        from .hook import SettingsError, check_remote

        token = _read_token(token_file)
        try:
            checked = check_remote(url, token)  # a refused token: nothing is written
        except SettingsError as exc:
            raise click.ClickException(str(exc)) from None
        for line in install_remote(url, agent, target, token) + [checked]:
            click.echo(line)
        codex = [t for t in _chosen(target, install=True) if t.client == "codex"]
        for t in codex:
            _after_codex_install(t, not no_codex_trust)
        return
    from persmem_core.sdk import get_host, served_agent

    host = get_host()
    if agent is not None:
        served_agent(host, agent)  # an unknown or revoked agent is refused here, as by `persmem serve --agent`
    for t in _chosen(target, install=True):
        lines = install_target(t, hook_command(t.client, host.home, agent))
        for line in lines:
            click.echo(line)
        if t.client == "codex":
            _after_codex_install(t, not no_codex_trust)


@hooks.command()
def status() -> None:
    """Show which persmem hooks are installed, and whether a server is answering for them."""
    from persmem_core.sdk import get_host

    from .hook import socket_path
    from .installer import status as target_status

    host = get_host()
    for t in _chosen("all"):
        for line in target_status(t, host.home):
            click.echo(line)
    sock = socket_path(str(host.home))
    click.echo(f"server: {sock}: {_state(str(host.home), sock)}")


def _state(home: str, sock: str) -> str:
    """Whether a server of this user answers on `sock`, checked as the hooks check it (a socket, or a process on
    it, that is not this user's is reported, not trusted)."""
    import socket

    from .hook import HookFailed, Untrusted, check_peer, trusted_socket

    try:
        trusted_socket(home, sock)
        with socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(1.0)
            probe.connect(sock)
            check_peer(probe, sock)
    except Untrusted as exc:
        return f"NOT TRUSTED, the hooks send nothing there: {exc}"
    except (HookFailed, OSError):
        return "no server is running (the hooks do nothing until one is)"
    return "a server is listening"


@hooks.command()
@click.option("--target", type=TARGET_CHOICE, default="all", show_default=True, help="Which client's settings.")
def uninstall(target: str) -> None:
    """Remove the persmem hooks (and nothing else); a file nothing else changed in is restored from its backup."""
    from .installer import uninstall as uninstall_target

    for t in _chosen(target):
        if not t.hooks_file.exists() and (t.feature_file is None or not t.feature_file.exists()):
            click.echo(f"{t.hooks_file}: does not exist, nothing to change")
            continue
        for line in uninstall_target(t):
            click.echo(line)


@click.group()
def sessions() -> None:
    """Session archives of Claude Code and Codex: import existing ones."""


@sessions.command("import")
@click.option("--claude", "claude", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="Claude Code transcripts: the projects folder, one project's folder or one .jsonl file "
                   "(default: $CLAUDE_CONFIG_DIR/projects or ~/.claude/projects). Repeatable.")
@click.option("--codex", "codex", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="Codex rollouts: a Codex home, its sessions folder or one rollout-*.jsonl file (default: "
                   "$CODEX_HOME or ~/.codex). Repeatable.")
@click.option("--agent", envvar="PERSMEM_AGENT",
              help="The agent the sessions belong to (default: [server] default_agent). Env PERSMEM_AGENT.")
def import_sessions(claude: tuple[Path, ...], codex: tuple[Path, ...], agent: str | None) -> None:
    """Archive (and index) the sessions Claude Code and Codex already saved here, as the hooks would have.

    Safe to run again: only lines not archived yet are sent. Without --claude or --codex both defaults are
    read (a missing folder is skipped); with either, only the paths given. Uses the running server, or holds
    the home itself while it runs.
    """
    from persmem_core.sdk import get_host
    from persmem_core.sdk import served_agent

    from .importer import ImportStopped, claude_root, codex_root, run_import

    host = get_host()
    if agent is not None:
        served_agent(host, agent)  # an unknown or revoked agent is refused before anything is read
    if not claude and not codex:
        claude = tuple(p for p in [claude_root()] if p.is_dir())
        codex = tuple(p for p in [codex_root()] if p.is_dir())
        if not claude and not codex:
            raise click.ClickException(f"no transcripts here: neither {claude_root()} nor {codex_root()} exists. "
                                       "Name the folders with --claude PATH / --codex PATH.")
    try:
        report = run_import(host, list(claude), list(codex), agent)
    except ImportStopped as exc:
        raise click.ClickException(str(exc)) from None
    for line in report.skipped:
        click.echo(line, err=True)
    click.echo(report.summary())
