"""How requests reach the host's tools: MCP over Streamable HTTP and over stdio, the owner's local socket.

- `server.py`          serving the tools over MCP Streamable HTTP: the ASGI app, its middleware, uvicorn
- `tools.py`           plugin functions as MCP tools (caller injection, argument checks, clear errors, limits)
- `stdio_bridge.py`    `persmem serve --transport stdio`: one client's stdio session, served by the home's owner
- `stdio_eras.py`      a stdio session's protocol era, and the headers that route its messages to the owner
- `local_server.py`    the owner's side of the local socket: MCP for local clients
- `owner_card.py`      the owner's card and the local socket's paths (light: taken before the MCP libraries load)
- `ownership.py`       which process owns a home (its lock, its private socket); where the socket is: paths.py
- `takeover.py`        a server taking a home: at once when nobody owns it, else from the one that does
- `server_process.py`  a real `persmem serve --transport http` subprocess and an MCP client to it (tests, benchmarks)
- `tool_answers.py`    a tool's answer as a client reads it: its JSON value or the server's error; is it clear
- `http_deadlines.py`  read deadlines for HTTP requests (slowloris)
- `http_headers.py`    security headers on every response
- `http_limits.py`     the request body limit, answered so that an MCP client shows why
"""
