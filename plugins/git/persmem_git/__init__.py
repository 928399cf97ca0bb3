"""persmem-plugin-git: the `git_op` tool.

- `plugin.py`     the pluggy hooks: [git], the tool, the service into host.state, doctor lines
- `config.py`     the [git] section: allowed remotes, authors per agent, limits, the OS sandbox setting
- `service.py`    what git_op uses on every call: the config, the [workspace] roots, persmem's own files, the
                  empty HOME git runs with (built at startup, kept in host.state)
- `tools.py`      the MCP tool
- `operations.py` which git operations exist and which options/arguments each accepts
- `repo.py`       finding and vetting a repository: inside the roots, no `.git` pointing elsewhere, no
                  config key that would run a program
- `remotes.py`    which remote URLs clone/fetch/pull/push may reach
- `runner.py`     running git with hooks off, system/global config ignored, dangerous keys overridden
"""
