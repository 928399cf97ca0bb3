"""[shell] section of persmem.toml: which commands may run, and their limits (the workspace roots are the
core's [workspace] section)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta

from persmem_core.sdk import ConfigSection, bubblewrap


class CommandRule(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """How one program may be called. Options are judged with GNU abbreviations in mind: a denied
    `--compress-program` also refuses `--compress-prog`."""

    subcommands: Annotated[
        list[str] | None, Meta(description="If set, the first argument that is not an option must be one of these.")
    ] = None
    deny: Annotated[
        list[str], Meta(description="Options refused anywhere in the argv (exact, `--opt=value`, abbreviations).")
    ] = []
    deny_any: Annotated[bool, Meta(description="Refuse every call (a placeholder that documents why).")] = False
    max_args: Annotated[int, Meta(ge=0)] = 200


# A developer box's read-mostly commands. None of them can run another program with these options denied.
DEFAULT_ALLOW: dict[str, CommandRule] = {
    "ls": CommandRule(deny=["-L", "--dereference"]), "cat": CommandRule(), "head": CommandRule(), "tail": CommandRule(deny=["-f", "--follow", "-F"]),
    "wc": CommandRule(), "pwd": CommandRule(), "echo": CommandRule(), "date": CommandRule(deny=["-s", "--set", "-f", "--file"]),
    "du": CommandRule(deny=["-L", "--dereference"]), "df": CommandRule(), "stat": CommandRule(),
    "file": CommandRule(deny=["-m", "--magic-file", "-C", "--compile"]), "tree": CommandRule(deny=["-o", "-l"]), "uname": CommandRule(), "whoami": CommandRule(), "which": CommandRule(),
    "basename": CommandRule(), "dirname": CommandRule(), "realpath": CommandRule(), "nl": CommandRule(),
    "cut": CommandRule(), "tr": CommandRule(), "uniq": CommandRule(), "comm": CommandRule(), "diff": CommandRule(),
    "cmp": CommandRule(), "sha256sum": CommandRule(), "md5sum": CommandRule(), "sha1sum": CommandRule(),
    # Following symlinks while recursing could read outside the workspace through a link inside it.
    "grep": CommandRule(deny=["-R", "--dereference-recursive"]),
    "rg": CommandRule(deny=["--pre", "--pre-glob", "-z", "--search-zip", "-L", "--follow", "--hostname-bin"]),
    "sort": CommandRule(deny=["-o", "--output", "--compress-program", "-T", "--temporary-directory"]),
    "find": CommandRule(deny=["-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf",
                              "-fls", "-L", "-follow"]),
}


class ShellConfig(ConfigSection):
    allow: Annotated[
        dict[str, CommandRule],
        Meta(description="Programs shell_exec may run and how; replaces the default list when set "
                         "(`persmem doctor` prints the effective list)."),
    ] = {}
    extra_allow: Annotated[
        dict[str, CommandRule],
        Meta(description="Programs added to the default list, e.g. {python3 = {deny = [\"-c\"]}} or "
                         "{make = {subcommands = [\"test\"]}}."),
    ] = {}
    max_timeout: Annotated[float, Meta(gt=0, description="The longest time limit a call may ask for, seconds.")] = 300.0
    max_output_bytes: Annotated[
        int, Meta(ge=1024, description="stdout and stderr are each cut at this size; the process is stopped.")
    ] = 256_000
    max_read_bytes: Annotated[int, Meta(ge=1024, description="file_read refuses larger files without a line range.")] = 2_000_000
    max_write_bytes: Annotated[int, Meta(ge=1024, description="Largest content file_write accepts.")] = 5_000_000
    sandbox: bubblewrap.SandboxSetting = "auto"
    sandbox_read_only: Annotated[
        list[str],
        Meta(description="Extra folders the sandbox shows read-only, for allowed programs installed outside "
                         "/usr (e.g. /opt/node)."),
    ] = []
    tmp_max_bytes: Annotated[
        int, Meta(ge=1_048_576, description="Size of a command's private /tmp (TMPDIR), removed when it ends.")
    ] = 256 * 1024 * 1024
    max_concurrent_per_agent: Annotated[
        int, Meta(ge=1, description="Commands one agent may run at once; more are refused until one ends.")
    ] = 4
    # What one sandboxed command may use (docs/security.md); a limit reached stops it with a note saying which.
    max_processes: Annotated[
        int, Meta(ge=8, description="Processes and threads one command may have at once (fork bombs stop here).")
    ] = 256
    max_memory_mb: Annotated[
        int, Meta(ge=64, description="Memory of one command and everything it starts, MB (a cgroup, where the "
                                     "server runs as root; else only max_address_space_mb per process).")
    ] = 2048
    max_address_space_mb: Annotated[
        int, Meta(ge=256, description="Virtual memory of each process, MB (RLIMIT_AS).")
    ] = 8192
    max_file_mb: Annotated[
        int, Meta(ge=1, description="The largest file a command may write, MB (RLIMIT_FSIZE).")
    ] = 1024
    max_open_files: Annotated[int, Meta(ge=64, description="Open files per process (RLIMIT_NOFILE).")] = 1024
    min_free_disk_mb: Annotated[
        int, Meta(ge=0, description="A command is stopped (and none starts) while a workspace root's disk has less "
                                    "free space than this, MB: what a command can write is bounded by it.")
    ] = 1024

    def effective_allow(self) -> dict[str, CommandRule]:
        return {**(self.allow or DEFAULT_ALLOW), **self.extra_allow}

    def limits(self) -> bubblewrap.Limits:
        mb = 1024 * 1024
        return bubblewrap.Limits(processes=self.max_processes, open_files=self.max_open_files,
                                 file_bytes=self.max_file_mb * mb, address_space_bytes=self.max_address_space_mb * mb,
                                 memory_bytes=self.max_memory_mb * mb, min_free_disk_bytes=self.min_free_disk_mb * mb,
                                 section="shell")
