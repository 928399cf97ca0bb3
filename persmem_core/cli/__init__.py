"""The `persmem` command.

- `main.py`     the root click group, the host a command works on, and plugins' subcommands
- `commands/`   the core's own subcommands, one module each (serve, agent, connect, config, key, backup...)
"""
