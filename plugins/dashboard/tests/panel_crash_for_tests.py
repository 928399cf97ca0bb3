"""A plugin whose register_panels raises after registering a panel: its panels are disabled, shown as a
problem, and the server runs (loaded with PERSMEM_PLUGIN_MODULES)."""

from persmem_core.sdk import hookimpl


@hookimpl
def register_panels(register, host):
    register("tides", title="Tides", template="<p id=tides>high at noon</p>", context=lambda view: {})
    raise RuntimeError("the tide tables are missing")
