"""Who is calling: agents and their credentials, the HTTP auth middleware, OAuth 2.1 for remote clients.

- `agents.py`      named agents and their credentials (tokens, secret paths)
- `token_files.py` each agent's token kept in a file only the user can read, for setup lines that work as pasted
- `scope.py`       the agent and transport a request speaks for, as the middleware leaves them in the scope
- `middleware.py`  who is calling, for every HTTP request: Host/Origin checks, bearer token or secret path
- `failures.py`    failed authentications, counted wherever a credential is checked, and the delay they earn
- `oauth/`         persmem as its own OAuth 2.1 authorization server (claude.ai custom connectors)
"""
