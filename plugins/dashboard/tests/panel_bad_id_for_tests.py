"""A plugin whose second panel id is invalid: all its panels are disabled, shown as a problem, and the server
runs (loaded with PERSMEM_PLUGIN_MODULES)."""

from persmem_core.sdk import hookimpl


@hookimpl
def register_panels(register, host):
    register("almanac", title="Almanac", template="<p id=almanac>tides</p>", context=lambda view: {})
    register("Bad Id!", title="Bad", template="<p>never</p>", context=lambda view: {})
