"""OAuth 2.1 for remote MCP clients (claude.ai custom connectors, Claude Desktop, any spec-following client).

persmem is its own authorization server and resource server. A client discovers it (RFC 9728 protected-resource
metadata, RFC 8414 authorization-server metadata), registers (RFC 7591) or names itself by a client ID metadata
document (an https URL), sends the operator to the consent page, where the operator proves who they are and
picks the agent the client will act as, and gets short-lived access tokens plus rotating refresh tokens bound to
this server (RFC 8707). Every MCP call with such a token runs as that agent, exactly as with the agent's own
bearer token.

The MCP SDK's authorization-server handlers (`mcp.server.auth.handlers`) do the request parsing, PKCE and
grant checks; the modules here supply what they leave to the server:
- `records`: the data kept in `<home>/oauth.json` (clients, codes, grants, the operator's credential);
- `store`: that file, with hashed secrets, single-use codes, refresh rotation and replay detection;
- `registry_file`: the store's file on disk: its locks, atomic writes, the cached copy and its token index, pruning;
- `operator_credential`: the operator's passphrase (scrypt) and one-time approval codes, kept in that file;
- `provider`: the SDK's provider interface over the store, plus the pending consents;
- `client_documents`: fetching client ID metadata documents without becoming an SSRF proxy;
- `consent`: the page where the operator approves a client as an agent;
- `routes`: the endpoints, their metadata, and the resource check at the token endpoint.
The CLI is `persmem oauth` (persmem_core/cli/commands/oauth.py).
"""
