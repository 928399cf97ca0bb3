"""Base class for config sections, and the core's own sections.

Plugins subclass `ConfigSection` so that a typo in a field name is an error
with a path (`$.amq.agnets`), not a silently ignored setting. Descriptions in
`msgspec.Meta` end up in `persmem config schema`.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta


class ConfigSection(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A plugin's config section: every field needs a default."""


AgentName = Annotated[
    str,
    Meta(pattern=r"^[a-z][a-z0-9_-]{0,31}$", description="lowercase letters, digits, _ and -; starts with a letter"),
]


class ServerConfig(ConfigSection):
    """[server]: how `persmem serve` listens and whom it lets in."""

    host: Annotated[str, Meta(description="Address to bind. Non-loopback needs an agent with credentials.")] = (
        "127.0.0.1"
    )
    port: Annotated[int, Meta(ge=0, le=65535, description="TCP port; the MCP endpoint is /mcp.")] = 8765
    transport: Annotated[Literal["http", "stdio"], Meta(description="Default for `persmem serve`.")] = "http"
    public_url: Annotated[
        str, Meta(description="URL clients use behind a reverse proxy, e.g. https://mcp.example.com; its host is allowed.")
    ] = ""
    allowed_hosts: Annotated[
        list[str], Meta(description="Extra Host header values to accept (DNS-rebinding protection).")
    ] = []
    allowed_origins: Annotated[
        list[str], Meta(description="Extra Origin header values to accept, e.g. https://claude.ai.")
    ] = []
    max_body_bytes: Annotated[int, Meta(ge=1024, description="Larger request bodies get 413 before parsing.")] = (
        4 * 1024 * 1024
    )
    header_timeout_seconds: Annotated[
        float, Meta(gt=0, description="A request's headers must all arrive within this time from its first byte "
                    "(and a new connection must start a request within it); slower clients get 408 and are closed.")
    ] = 10.0
    body_idle_timeout_seconds: Annotated[
        float, Meta(gt=0, description="Longest pause allowed while a request body is arriving; then 408 and close.")
    ] = 30.0
    body_timeout_seconds: Annotated[
        float, Meta(gt=0, description="A request body must arrive whole within this time after the headers.")
    ] = 120.0
    default_agent: Annotated[
        AgentName,
        Meta(description="Agent for stdio without --agent, and for HTTP on loopback while no agent has credentials."),
    ] = "local"
    log_level: Annotated[
        Literal["debug", "info", "warning", "error"],
        Meta(description="`debug`, `info`, `warning` or `error`. Logs go to stderr."),
    ] = "info"
    json_response: Annotated[
        bool, Meta(description="Answer MCP POSTs with plain JSON instead of an SSE stream (both are valid MCP; "
                   "JSON is faster, SSE lets long tools stream progress).")
    ] = True
    stateless: Annotated[
        bool, Meta(description="Keep no MCP session between requests, so any node behind a round-robin load "
                   "balancer can answer any request (docs/scale-out.md). Off: one server keeps a session per client.")
    ] = False


class PluginsConfig(ConfigSection):
    """[plugins]: which plugins load."""

    disabled: Annotated[list[str], Meta(description="Plugin names not to load. Also PERSMEM_DISABLE_PLUGINS=a,b.")] = []
    modules: Annotated[
        list[str], Meta(description="Extra modules to load as plugins (development). Also PERSMEM_PLUGIN_MODULES=a,b.")
    ] = []


class ToolsConfig(ConfigSection):
    """[tools]: which tool sets a connection lists (persmem_core/tool_sets.py)."""

    default_sets: Annotated[
        list[Annotated[str, Meta(pattern=r"^[a-z][a-z0-9_]{0,31}$")]],
        Meta(description="Tool sets of an agent never given its own (`persmem agent tools NAME --set ...`): memory, "
                         "sessions, mail, chorus, workspace, web, ... or all. Each listed tool costs tokens in every "
                         "session; `persmem doctor` prints what each set costs. Also PERSMEM_DEFAULT_TOOL_SETS=a,b."),
    ] = msgspec.field(default_factory=lambda: ["memory", "sessions", "mail"])


class WorkspaceConfig(ConfigSection):
    """[workspace]: the folders the workspace tools (shell, files, git) work in, set once for all of them."""

    roots: Annotated[
        list[str],
        Meta(description="Folders the workspace tools may touch (files, commands, repositories). Empty: "
                         "<home>/workspace. The first is where relative paths and commands start. persmem's own "
                         "data folder is never part of the workspace, even under a root."),
    ] = []


class EncryptionConfig(ConfigSection):
    """[encryption]: memories, session archives (and mail, with [amq] encrypt) sealed at rest with AES-256-GCM."""

    enabled: Annotated[
        bool, Meta(description="Seal new writes under the home's key (created on first start when none is found). "
                   "Off: new writes are plaintext; data sealed before still needs its key. `persmem key migrate` "
                   "rewrites existing files to match.")
    ] = True
    key_file: Annotated[
        str, Meta(description="The 32-byte key file (0600, owned by the server's user); default <home>/persmem.key. "
                  "PERSMEM_KEY (64 hex characters) or the systemd credential persmem.key take precedence.")
    ] = ""


class OAuthConfig(ConfigSection):
    """[oauth]: the OAuth 2.1 authorization server remote clients (claude.ai custom connectors) sign in with.
    Each grant acts as the agent the operator picked on the consent page."""

    enabled: Annotated[
        bool, Meta(description="Serve OAuth (discovery metadata, registration, consent, tokens) beside /mcp. It runs "
                   "when [server] public_url is set or the server listens on loopback; off: bearer tokens and "
                   "secret paths only.")
    ] = True
    access_token_seconds: Annotated[
        int, Meta(ge=1, le=86400, description="How long an OAuth access token works; clients refresh it after.")
    ] = 3600
    refresh_token_days: Annotated[
        float, Meta(gt=0, le=365, description="A grant whose refresh token goes unused this long ends (each refresh "
                    "starts the time again).")
    ] = 30.0
    code_seconds: Annotated[
        int, Meta(ge=1, le=600, description="How long an authorization code may wait to be exchanged (once).")
    ] = 120
    consent_minutes: Annotated[
        int, Meta(ge=1, le=60, description="How long a consent page stays valid after the client opened it.")
    ] = 10
    client_documents: Annotated[
        bool, Meta(description="Accept client ID metadata documents: a client whose client_id is an https URL is "
                   "described by the JSON document at that URL, which the server fetches (timeout 5 s, 64 KB).")
    ] = True
    client_document_private_hosts: Annotated[
        list[str], Meta(description="Host names whose client ID metadata documents may be fetched although they "
                        "resolve to a private or loopback address (other such fetches are refused: SSRF).")
    ] = []
    max_clients: Annotated[
        int, Meta(ge=1, description="Most dynamically registered clients kept; registration is open to anyone, so "
                  "clients that never got a grant are dropped after a day, and beyond this number refused.")
    ] = 1000


class ClusterConfig(ConfigSection):
    """[cluster]: the NATS JetStream cluster several persmem nodes share (docs/scale-out.md). Empty `servers`: one
    box, nothing is replicated, and no plugin connects anywhere."""

    servers: Annotated[
        list[str], Meta(description='NATS URLs of the cluster, e.g. ["nats://10.0.0.1:4222", "nats://10.0.0.2:4222"]. '
                        "Empty: this persmem runs alone.")
    ] = []
    node: Annotated[
        str, Meta(pattern=r"^$|^[A-Za-z0-9_-]{1,64}$",
                  description="This persmem node's name in the cluster (logs, snapshots); default the host name.")
    ] = ""
    replicas: Annotated[
        int, Meta(ge=1, le=5, description="Copies JetStream keeps of each stream; a write is acknowledged once a "
                  "majority of them has it. 3 survives the loss of one NATS server.")
    ] = 3
    credentials: Annotated[
        str, Meta(description="A NATS .creds file (user JWT and seed) to authenticate with (empty: none). It must "
                  "be private to the server's user (0600).")
    ] = ""
    nkey_file: Annotated[
        str, Meta(description="A file holding this node's NATS user nkey seed (SU...), as `persmem cluster up` and "
                  "`persmem cluster user` write them (empty: none). It must be private to the server's user (0600).")
    ] = ""
    tls_ca_file: Annotated[
        str, Meta(description="The CA certificate (PEM) the NATS servers' TLS certificates are checked against "
                  "(empty: the system's CAs, and TLS only for tls:// servers).")
    ] = ""
    connect_timeout_seconds: Annotated[
        float, Meta(gt=0, le=300, description="How long startup waits for the cluster before it gives up.")
    ] = 20.0
    request_timeout_seconds: Annotated[
        float, Meta(gt=0, le=300, description="How long one write waits for JetStream's acknowledgement (a NATS "
                    "server failing over takes a few seconds).")
    ] = 10.0
