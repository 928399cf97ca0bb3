"""persmem-plugin-shell: shell_exec and the file tools, sharing one workspace sandbox.

- `plugin.py`    the pluggy hooks: [shell], the tools, the service into host.state, doctor lines
- `config.py`    the [shell] section: the command allowlist, limits, the OS sandbox setting
- `service.py`   the service the tools share: the config, the workspace sandbox over the [workspace] roots,
                 the folder for TMPDIRs (built at startup, kept in host.state)
- `tools.py`     the MCP tools
- `sandbox.py`   path confinement: resolve, compare components, refuse symlink escapes, FIFOs, devices
- `allowlist.py` judging a whole argv against the allowlist (programs, subcommands, options)
- `runner.py`    running an argv without a shell: minimal env, a private TMPDIR, the OS sandbox when used
- `files.py`     file_read, file_write (atomic, never through a symlink), file_patch, diff_generate
"""
