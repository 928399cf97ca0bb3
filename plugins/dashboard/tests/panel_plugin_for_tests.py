"""A third-party plugin that only adds a dashboard panel (loaded with PERSMEM_PLUGIN_MODULES)."""

from persmem_core import hookimpl

TEMPLATE = """<p id="weather">Forecast for {{ data.city }}: {{ data.sky }}</p>"""


@hookimpl
def register_panels(register, host):
    register("weather", title="Weather", template=TEMPLATE,
             context=lambda view: {"city": "Kite Hill", "sky": f"clear, asked by {view.agent} <b>"}, order=50)
