"""Running the programs tools start: a time and output cap, an OS sandbox that holds for a root server.

- `children.py`        a child process for a tool: no shell, a time limit, an output cap, the group killed
- `bubblewrap.py`      the OS sandbox (bwrap): what a command sees, its uid, its limits; support levels
- `launcher.py`        run as root: idmapped folders, the cgroup, the drop to an unprivileged uid, then bwrap
- `cgroup.py`          a cgroup per command (memory and processes), where the server may make one
- `workspace_lock.py`  commands share the workspace, git holds it alone from its vetting to its exit
"""
