"""A test plugin whose backup fails."""

from persmem_core import hookimpl


@hookimpl
def backup(host, dest):
    raise OSError("disk full (simulated)")
