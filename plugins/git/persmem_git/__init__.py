"""persmem-plugin-git: the `git_op` tool.

- `config.py`     the [git] section: repository roots, allowed remotes, authors per agent
- `operations.py` which git operations exist and which options/arguments each accepts
- `repo.py`       finding and vetting a repository: inside the roots, no `.git` pointing elsewhere, no
                  config key that would run a program
- `runner.py`     running git with hooks off, system/global config ignored, dangerous keys overridden
- `tools.py`      the MCP tool
- `plugin.py`     the pluggy hooks
"""
