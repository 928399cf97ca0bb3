"""persmem-plugin-shell: shell_exec and the file tools, sharing one workspace sandbox.

- `config.py`    the [shell] section: workspace roots, the command allowlist, limits
- `sandbox.py`   path confinement: resolve, compare components, refuse symlink escapes, FIFOs, devices
- `allowlist.py` judging a whole argv against the allowlist (programs, subcommands, options)
- `runner.py`    running an argv without a shell: minimal env, time limit, output cap, process-group kill
- `files.py`     file_read, file_write (atomic, never through a symlink), file_patch, diff_generate
- `tools.py`     the MCP tools
- `plugin.py`    the pluggy hooks
"""
