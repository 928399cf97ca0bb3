"""A test plugin that claims the [echo] config section the echo plugin already has."""

from persmem_core import ConfigSection, hookimpl


class Other(ConfigSection):
    x: int = 1


@hookimpl
def register_config(register):
    register("echo", Other)
