"""The core's own plugin, registered through the same entry point as any other.

It contributes the [server], [plugins], [tools], [workspace], [encryption], [oauth] and [cluster] config sections,
the `persmem_whoami` tool (in the `memory` tool set) and the host-level doctor checks.
"""

from __future__ import annotations

import os
import tempfile

from persmem_core import __version__
from persmem_core.context import CallContext
from persmem_core.checks import fail, pass_, warn
from persmem_core.doctor import check_port
from persmem_core.errors import ConfigError, UserError
from persmem_core.hookspecs import hookimpl
from persmem_core.net.addresses import is_loopback
from persmem_core.settings import (ClusterConfig, EncryptionConfig, OAuthConfig, PluginsConfig, ServerConfig,
                                   ToolsConfig, WorkspaceConfig)


@hookimpl
def register_config(register):
    register("server", ServerConfig)
    register("plugins", PluginsConfig)
    register("tools", ToolsConfig)
    register("workspace", WorkspaceConfig)
    register("oauth", OAuthConfig)
    register("encryption", EncryptionConfig)
    register("cluster", ClusterConfig)


def persmem_whoami(call: CallContext) -> dict:
    """Tell which agent this connection is authenticated as, over which transport, and which plugins the
    server runs with the names of the tools each one gives you. Call it first when unsure whose memory or
    inbox you are using, or which tool does what you need.
    Returns {"agent", "transport", "server", "version", "plugins": [{"name", "version", "tools": [...]}]}."""
    host = call.host
    tools: dict[str, list[str]] = {}
    for spec in host.collect_tools():
        tools.setdefault(spec.plugin, []).append(spec.name)
    plugins = [{"name": p.name, "version": p.version, "tools": sorted(tools.get(p.name, []))}
               for p in host.loaded_plugins()]
    return {
        "agent": call.agent,
        "transport": call.transport,
        "server": "persmem",
        "version": __version__,
        "plugins": plugins,
    }


@hookimpl
def register_tools(register):
    register(persmem_whoami, tool_set="memory")


@hookimpl
def doctor(host):
    checks = []
    try:
        server = host.config.server
        source = str(host.config_path) if host.config_path.exists() else "no config file: embedded defaults"
        checks.append(pass_("config valid", source))
    except ConfigError as exc:
        return [fail("config valid", str(exc))]
    for message in host.warnings:
        checks.append(warn("config", message))
    for info in host.plugins:
        if info.error:
            checks.append(warn(f"plugin {info.name}", f"not loaded: {info.error}"))
    checks.append(_check_home_writable(host))
    checks.append(check_port(host, server.host, server.port))
    checks.append(_check_auth(host, server))
    checks.append(_check_oauth(host, server))
    checks.append(_check_encryption(host))
    checks.append(_check_tool_costs(host))
    if host.section("cluster").servers:  # who may reach the NATS cluster, and whether frames are sealed and bound
        from persmem_core.cluster.nats_doctor import doctor_checks

        checks += doctor_checks(host.section("cluster"), host.section("encryption").enabled)
    return checks


def _check_tool_costs(host):
    """What each tool set's definitions cost per session, and whether the default sets keep to the budget."""
    from persmem_core.tool_costs import DEFAULT_BUDGET, Costs
    from persmem_core.tool_sets import default_sets

    costs = Costs(host)
    sets = default_sets(host)
    default = costs.of_sets(sets)
    line = (f"default ({'+'.join(sets)}) {default:,} {costs.unit()} per session; per set: {costs.summary()}. "
            f"`persmem agent tools NAME --add SET` gives an agent more")
    if default > DEFAULT_BUDGET:
        return warn("tool sets", f"{line}; the default is over the {DEFAULT_BUDGET:,}-token budget: set [tools] "
                    "default_sets to fewer sets.")
    return pass_("tool sets", line)


def _check_home_writable(host):
    try:
        host.home.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=host.home, prefix=".doctor-") as f:
            f.write(b"ok")
            f.flush()
            os.fsync(f.fileno())
        return pass_("data dir writable", str(host.home))
    except OSError as exc:
        return fail("data dir writable", f"{host.home}: {exc}. Set PERSMEM_HOME to a folder this user can write.")


def _check_auth(host, server):
    try:
        with_credentials = host.agents.has_credentials()
    except UserError as exc:
        return fail("agents", str(exc))
    names = host.agents.names()
    if with_credentials:
        return pass_("agents", f"{len(names)} agent(s) with credentials: {', '.join(names)}")
    if not is_loopback(server.host):
        return fail("agents", f"[server] host = {server.host!r} is not loopback and no agent has credentials; "
                    "run `persmem agent add NAME` first.")
    return warn("agents", "no agent has credentials: HTTP is open on loopback only, as agent "
                f"{server.default_agent!r}. Run `persmem agent add NAME` to require tokens.")


def _check_encryption(host):
    """Whether new writes are sealed, under which key from where, that its file is private, that every key the data
    needs is on hand and (with no server running) that no file still holds plaintext."""
    from persmem_core.crypto import keys
    from persmem_core.cli.commands.key import count_unsealed

    config = host.section("encryption")
    try:
        sealer = keys.load_sealer(host.home, config, host.environ, create=False)
        loaded = keys.find_key(host.home, config, host.environ)
    except UserError as exc:
        return fail("encryption", str(exc))
    if not config.enabled:
        needs = f"; data sealed before needs key {sealer.known_ids[0]}" if sealer.known_ids else ""
        return warn("encryption", f"off: new memories and sessions are written in plaintext{needs}. Set [encryption] "
                    "enabled = true and run `persmem key migrate` to seal them.")
    if loaded is None:
        unsealed = count_unsealed(host, keys.sealer_to_count_with(sealer, config))
        migrate = f"; {unsealed} file(s) written before hold plaintext: then run `persmem key migrate`" if unsealed \
            else ""
        return pass_("encryption", f"on; the key is created at {keys.key_file_path(host.home, config)} (0600) on the "
                     f"first start{migrate}")
    where = f"{loaded.where} (0600, ours)" if loaded.source == "file" else loaded.where
    if keys.next_key_path(host.home, config).exists():
        return warn("encryption", f"a key rotation did not finish (both keys are kept, everything reads): run "
                    f"`persmem key rotate` to finish it. Key {loaded.key_id} from {where}.")
    unsealed = count_unsealed(host, sealer)
    if unsealed:
        return warn("encryption", f"on, key {loaded.key_id} from {where}; but {unsealed} file(s) written before "
                    "still hold plaintext: stop the server and run `persmem key migrate`.")
    return pass_("encryption", f"on (AES-256-GCM), key {loaded.key_id} from {where}; keep a copy apart from the "
                 "home and its backups (`persmem key export`)")


def _check_oauth(host, server):
    """Whether remote clients (claude.ai connectors) can sign in with OAuth, and if not, the line that says why."""
    from persmem_core.transport.server import oauth_state

    issuer, line = oauth_state(host, server.host, server.port)
    detail = line.removeprefix("oauth: ")
    if not host.section("oauth").enabled:
        return pass_("oauth", detail)
    if issuer is None or "damaged" in line:
        return warn("oauth", detail)
    if "nobody can approve yet" in line and server.public_url:  # on loopback alone, OAuth is seldom what is used
        return warn("oauth", detail)
    return pass_("oauth", detail)
