"""A plugin that registers a panel id another plugin (panel_plugin_for_tests) already has: the server must not
start (loaded with PERSMEM_PLUGIN_MODULES)."""

from persmem_core.sdk import hookimpl


@hookimpl
def register_panels(register, host):
    register("weather", title="Other weather", template="<p>rain</p>", context=lambda view: {})
